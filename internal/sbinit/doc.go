// Package sbinit is PID 1 inside a sandbox, and the program that builds the
// sandbox before it runs.
//
// Program compiles a sandbox's Setup, on the host, into a program of raw
// system calls (forkexec.Prog) that init's clone runs before it execs init:
// it builds the sandbox's filesystem (new root on tmpfs, read-only image
// binds, generated /etc, fresh /proc with sensitive paths masked, minimal
// /dev, size-limited scratch tmpfs for /workspace, /tmp and /dev/shm),
// pivot_roots into it, drops every privilege init and the commands will
// never need (capabilities including the bounding set, uid 0, setgroups),
// and applies rlimits, Landlock, no_new_privs and the seccomp allowlist, so
// that init starts confined and every command it forks inherits all of it.
//
// Main (and MainOnStartupThread) is init itself: it sets its saved uid back
// (exec changed it) and serves exec requests over the control channel. Init
// is not dumpable and ignores every signal a command can send it, so a
// command cannot read its memory, steal its control channel or kill it.
package sbinit
