//go:build !race

package forkexec

// raceBuild: see race.go.
const raceBuild = false
