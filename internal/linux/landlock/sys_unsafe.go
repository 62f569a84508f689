package landlock

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of struct landlock_ruleset_attr as ABI 1 and ABI 6 define it.
const (
	rulesetAttrSizeV1 = 8
	rulesetAttrSizeV6 = unsafe.Sizeof(rulesetAttr{})
)

// createRuleset wraps landlock_create_ruleset(2).
func createRuleset(attr *rulesetAttr, size uintptr, flags uintptr) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, flags)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// addPathRule wraps landlock_add_rule(2) for LANDLOCK_RULE_PATH_BENEATH.
// The kernel struct is packed (12 bytes); the Go struct has trailing
// padding, which the kernel does not read.
func addPathRule(rulesetFD int, allowed uint64, parentFD int) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: allowed, Parent_fd: int32(parentFD)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
