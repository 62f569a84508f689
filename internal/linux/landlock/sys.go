package landlock

import "golang.org/x/sys/unix"

// Filesystem access rights (include/uapi/linux/landlock.h), by the ABI
// version that introduced them.
const (
	// ABI 1.
	accessExecute    = unix.LANDLOCK_ACCESS_FS_EXECUTE
	accessWriteFile  = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	accessReadFile   = unix.LANDLOCK_ACCESS_FS_READ_FILE
	accessReadDir    = unix.LANDLOCK_ACCESS_FS_READ_DIR
	accessRemoveDir  = unix.LANDLOCK_ACCESS_FS_REMOVE_DIR
	accessRemoveFile = unix.LANDLOCK_ACCESS_FS_REMOVE_FILE
	accessMakeChar   = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR
	accessMakeDir    = unix.LANDLOCK_ACCESS_FS_MAKE_DIR
	accessMakeReg    = unix.LANDLOCK_ACCESS_FS_MAKE_REG
	accessMakeSock   = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	accessMakeFifo   = unix.LANDLOCK_ACCESS_FS_MAKE_FIFO
	accessMakeBlock  = unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK
	accessMakeSym    = unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	// ABI 2: link or rename into another directory.
	accessRefer = unix.LANDLOCK_ACCESS_FS_REFER
	// ABI 3: truncate(2), ftruncate(2), O_TRUNC.
	accessTruncate = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	// ABI 5: ioctl(2) on character and block devices.
	accessIoctlDev = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// Scoped IPC restrictions, introduced by ABI 6.
const (
	scopeAbstractUnixSocket = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	scopeSignal             = unix.LANDLOCK_SCOPE_SIGNAL
)

// accessFile is every right that applies to a non-directory. The kernel
// rejects a rule on a non-directory carrying any other right with EINVAL.
const accessFile = accessExecute | accessWriteFile | accessReadFile | accessTruncate | accessIoctlDev

// maxABI is the newest Landlock ABI this package knows. Newer kernels are
// used at this level: ABI 7 added only audit-logging flags, and later ABIs
// add rights (for example restricting connections to pathname UNIX sockets)
// whose effect on sandboxed commands has not been evaluated here.
const maxABI = 7

// handledAccessFS returns every filesystem right known to ABI version abi.
func handledAccessFS(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	rights := uint64(accessExecute | accessWriteFile | accessReadFile | accessReadDir |
		accessRemoveDir | accessRemoveFile | accessMakeChar | accessMakeDir |
		accessMakeReg | accessMakeSock | accessMakeFifo | accessMakeBlock | accessMakeSym)
	if abi >= 2 {
		rights |= accessRefer
	}
	if abi >= 3 {
		rights |= accessTruncate
	}
	if abi >= 5 {
		rights |= accessIoctlDev
	}
	return rights
}

// erratumSignalScope is bit 1 of the LANDLOCK_CREATE_RULESET_ERRATA mask:
// Landlock erratum 2 (security/landlock/errata/abi-6.h). Kernels without
// the fix apply LANDLOCK_SCOPE_SIGNAL even between threads of one process
// when the threads are in different domains, which is exactly what
// restricting thread by thread produces; the Go runtime signals its own
// threads (for preemption), so the scope must not be used there.
const erratumSignalScope = 1 << 1

// rulesetAttr is struct landlock_ruleset_attr up to the scoped field (ABI
// 6). unix.LandlockRulesetAttr also has fields newer than any kernel this
// package uses; the kernel accepts a shorter struct, and a size that covers
// only the fields we set keeps the call valid on every ABI.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}
