// Package sbinit is PID 1 inside a sandbox: the airlock binary re-executed in
// init mode. It receives its setup over the control channel, builds the
// sandbox's filesystem from the inside (new root on tmpfs, read-only image
// binds, generated /etc, fresh /proc with sensitive paths masked, minimal
// /dev, size-limited scratch tmpfs for /workspace, /tmp and /dev/shm),
// pivot_roots into it, drops every privilege it will never need again
// (capabilities including the bounding set, uid 0, setgroups), applies
// no_new_privs, rlimits, Landlock and the seccomp allowlist to itself so that
// every command it forks inherits them, and then serves exec requests.
//
// Init is not dumpable and ignores every signal a command can send it, so a
// command cannot read its memory, steal its control channel or kill it.
package sbinit
