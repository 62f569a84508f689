package node

import (
	"github.com/airlockhq/airlock/internal/errdefs"
)

// The node's errors. Each is in a class of package errdefs, by which the
// edges answer it; an edge that answers some apart from their class
// matches them with errors.Is.
var (
	// ErrAuditRefused: the audit log cannot be written, and nothing is
	// run unrecorded.
	ErrAuditRefused = errdefs.New(errdefs.ErrUnavailable, "the audit log cannot be written, so nothing is run unrecorded; see the daemon's log")
	// ErrShutdown: the node is stopping.
	ErrShutdown = errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down")
	// ErrToolRemoved: a call found its tool in the config before a reload
	// removed it.
	ErrToolRemoved = errdefs.New(errdefs.ErrNotFound, "a reload of the config removed the tool")
	// ErrNoSandbox: no sandbox could be had for a tool.
	ErrNoSandbox = errdefs.New(errdefs.ErrUnavailable, "no sandbox could be created for this tool; see the daemon's log")
	// ErrBind: a tool's policy could not be bound to its sandbox.
	ErrBind = errdefs.New(errdefs.ErrUnavailable, "the sandbox's network could not be set up; see the daemon's log")
	// ErrGone: a file call's error once the session's sandbox is gone.
	ErrGone = errdefs.New(errdefs.ErrConflict, "the session's sandbox is gone")
	// ErrTooMany: the caller's share is spent (its token's concurrency,
	// or its failed authentications); it may try again shortly.
	ErrTooMany = errdefs.New(errdefs.ErrUnavailable, "too many requests")
	// ErrDiskFull: a file call met the sandbox's disk ceiling.
	ErrDiskFull = errdefs.New(errdefs.ErrLimit, "the sandbox's disk ceiling is reached")
)

// Refusal is an error that says when to try again: a call refused for
// want of capacity or of the caller's share. It matches Kind.
type Refusal struct {
	Kind       error // ErrTooMany, sandbox.ErrCapacity or errdefs.ErrUnavailable
	Msg        string
	RetryAfter int // seconds
}

func (e *Refusal) Error() string { return e.Msg }

// Unwrap returns the refusal's kind.
func (e *Refusal) Unwrap() error { return e.Kind }
