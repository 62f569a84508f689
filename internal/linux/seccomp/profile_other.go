//go:build linux && !amd64 && !arm64

package seccomp

import "runtime"

// native marks the architecture as unsupported: DefaultProfile returns a
// profile without rules and Compile refuses it, so a sandbox on such a
// machine fails closed instead of running unfiltered by accident.
var native = &archTable{name: runtime.GOARCH}
