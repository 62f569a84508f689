// Command truebin exits 0. It is the benchmark's static stand-in for
// /bin/true: the same bytes run from an imported image and from the host,
// so that a comparison of the two roots does not also compare two
// programs.
package main

func main() {}
