// Package landlock confines a process with the Linux Landlock LSM.
//
// It is a small leaf wrapper over the three Landlock system calls
// (landlock_create_ruleset, landlock_add_rule and landlock_restrict_self)
// for one job: a sandbox init process restricts itself, on every one of its
// OS threads, before it forks commands, so that every command inherits the
// same filesystem confinement and cannot undo it.
//
// Restrict is best effort in the way Landlock intends: it uses the newest
// ABI that both the running kernel and this package know, handles every
// filesystem access right of that ABI (so everything not explicitly granted
// by Rules is denied), and quietly does nothing on kernels without Landlock.
// On ABI 6 and later it also scopes abstract UNIX sockets and signals to
// the sandbox. Network access rights are deliberately not handled, so TCP
// bind and connect stay unrestricted by Landlock.
//
// Restrict needs syscall.AllThreadsSyscall, which the Go runtime refuses in
// binaries that link cgo (including every -race build, and programs that
// import net or os/user with cgo enabled); such binaries get an error rather
// than a silently partial confinement. Build the sandbox init with
// CGO_ENABLED=0.
package landlock
