package main

// int80getpid calls getpid through the 32-bit int 0x80 entry point.
func int80getpid() int32
