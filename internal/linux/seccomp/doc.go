// Package seccomp builds, compiles and installs the seccomp-BPF allowlist
// that airlock applies to every sandboxed command.
//
// The profile is modelled on the default profile of Docker (moby): the
// syscalls that ordinary programs and the Go runtime need are allowed
// unconditionally, a few are allowed only for safe argument values, and
// everything else fails with EPERM. It is written down as reviewed Go data
// (see profile.go and the per-architecture tables) rather than loaded from a
// file, so every change to it shows up in code review, and every family of
// syscalls that it refuses carries a note saying which attack that stops.
//
// The sandbox's init process applies the filter to itself, after which every
// command it forks and executes inherits it:
//
//	// no_new_privs must already be set on the calling thread.
//	prog, err := seccomp.DefaultProfile().Compile()
//	if err != nil { ... }
//	if err := seccomp.Install(prog); err != nil { ... }
//
// [Profile.Compile] turns a profile into a classic BPF program that:
//
//  1. kills the process if seccomp_data.arch is not the native audit
//     architecture, and on amd64 if the syscall number carries the x32 bit,
//     so that i386 (int 0x80) and x32 entry points cannot be used to reach
//     syscalls through numbers the allowlist never looked at;
//  2. finds the syscall number with a binary search (a tree of JGE
//     instructions over the sorted numbers), so a lookup costs a handful of
//     instructions instead of a walk down a 300-entry chain;
//  3. checks the arguments of the few syscalls whose rules depend on them
//     (clone, socket, socketpair, ioctl, personality).
//
// [Install] loads the program with seccomp(SECCOMP_SET_MODE_FILTER) and
// SECCOMP_FILTER_FLAG_TSYNC, so that every thread of the Go process, not
// only the calling one, is filtered.
package seccomp
