//go:build !amd64

package main

func int80getpid() int32 { return -1 }
