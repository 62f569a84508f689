// Package api holds the types of airlock's HTTP API (v1) that both the
// daemon and the Go client use. The result of a run is result.Result, the
// object `airlock run --json` prints.
package api

import (
	"encoding/json"
	"time"
)

// DefaultSocket is the unix socket the daemon serves the API on unless
// told otherwise.
const DefaultSocket = "/run/airlock/airlock.sock"

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	// Tool names a tool of the daemon's config.
	Tool string `json:"tool"`
	// Argv is the command; Argv[0] is looked up in the sandbox's PATH.
	Argv []string `json:"argv"`
	// Env adds KEY=VALUE entries to the command's environment (see Env).
	Env Env `json:"env,omitempty"`
	// Workdir is the working directory inside; default the tool's.
	Workdir string `json:"workdir,omitempty"`
	// Stdin is fed to the command's standard input.
	Stdin string `json:"stdin,omitempty"`
	// TTY gives the command a terminal of this size (see TTYUpgrade).
	TTY *TTYSize `json:"tty,omitempty"`
	// Limits, if set, lowers the tool's ceilings for this run.
	Limits *RunLimits `json:"limits,omitempty"`
}

// RunLimits lowers a run's ceilings under its tool's, by name: each set
// field replaces the tool's ceiling of that name for this run only. A
// value above the tool's ceiling is refused (403 denied, naming the limit
// and the ceiling): a run may lower its limits, never raise them.
type RunLimits struct {
	// Memory is a size, e.g. "64MiB".
	Memory string `json:"memory,omitempty"`
	// Pids is a count of processes and threads.
	Pids int64 `json:"pids,omitempty"`
	// Output is a size of stdout plus stderr, e.g. "1MiB".
	Output string `json:"output,omitempty"`
	// Time is the wall-clock ceiling, e.g. "2s".
	Time string `json:"time,omitempty"`
	// CPUTime is the CPU-time budget, e.g. "1s".
	CPUTime string `json:"cpu_time,omitempty"`
}

// TTYUpgrade is the protocol a run or an exec with a terminal (a TTY in
// its request) switches its connection to: the request carries
// "Connection: Upgrade" and "Upgrade: airlock-tty", and once the command
// has its sandbox the daemon answers 101 Switching Protocols. From then on
// the daemon sends the run's events as NDJSON (as with Accept: NDJSON; the
// terminal's output is stdout events) and ends with the result event; the
// client sends TTYInput lines. A refusal before the switch is an ordinary
// error answer. The connection closing ends the command, as an interrupt
// would.
const TTYUpgrade = "airlock-tty"

// TTYSize is a terminal's size in characters.
type TTYSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// TTYInput is one line a client sends on a TTYUpgrade stream: what was
// typed, a new window size, or the end of input (typed as a Ctrl-D).
type TTYInput struct {
	Data   []byte   `json:"data,omitempty"`
	Resize *TTYSize `json:"resize,omitempty"`
	EOF    bool     `json:"eof,omitempty"`
}

// MaxTTYInput bounds one TTYInput line, in bytes.
const MaxTTYInput = 64 << 10

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	// Code is a stable word: invalid, not_found, method_not_allowed,
	// too_large, unavailable, audit_unavailable, capacity,
	// too_many_requests, internal, unauthorized, forbidden, ended.
	Code string `json:"code"`
	// Message is written for the caller and never holds host paths or
	// secrets.
	Message string `json:"error"`
}

// Error codes.
const (
	CodeInvalid          = "invalid"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooLarge         = "too_large"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	// CodeAuditUnavailable: the audit log cannot be written, so the run
	// (or session) was refused rather than run unrecorded.
	CodeAuditUnavailable = "audit_unavailable"
	// CodeCapacity (503): the node's capacity (live sandboxes, or the
	// sums of their memory or pids ceilings) is spent; Retry-After says
	// when to try again.
	CodeCapacity = "capacity"
	// CodeTooManyRequests (429): the caller's token has as many calls in
	// flight and sessions open as its concurrency allows; Retry-After
	// says when to try again.
	CodeTooManyRequests = "too_many_requests"
	// CodeEnded (409): an exec or file call on a session that has ended.
	CodeEnded = "ended"
)

// Tool describes a configured tool (GET /v1/tools).
type Tool struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Warm        int      `json:"warm"`
	Egress      []string `json:"egress"`
	Services    []string `json:"services"`
}

// PoolStats are one tool's warm-pool counters since the daemon started
// (GET /v1/pools).
type PoolStats struct {
	// Name is the tool's.
	Name string `json:"name"`
	// Warm is the target; Idle how many are ready now.
	Warm int `json:"warm"`
	Idle int `json:"idle"`
	// Min and Max bound an adaptive pool's target (pool: {min, max});
	// both 0 for a fixed one (pool.warm).
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
	// ClaimRate is the claims per second an adaptive pool sizes itself
	// for, and BuildNanos the time it measured to build a sandbox.
	ClaimRate  float64 `json:"claim_rate,omitempty"`
	BuildNanos int64   `json:"build_ns,omitempty"`
	// Reason says why the target is what it is, for a person.
	Reason string `json:"reason"`
	// Hits were claims served warm, Misses claims that created a sandbox
	// on the spot.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Created counts sandboxes the replenisher built; CreateFailures its
	// failed attempts.
	Created        int64 `json:"created"`
	CreateFailures int64 `json:"create_failures"`
	// Discarded counts ready sandboxes found dead and destroyed unused.
	Discarded int64 `json:"discarded"`
	// Evicted counts ready sandboxes destroyed unused to make room for a
	// claim of another pool when the node was at capacity.
	Evicted int64 `json:"evicted"`
	// Released counts ready sandboxes an adaptive pool destroyed unused
	// because demand fell below what it held.
	Released int64 `json:"released"`
	// AtCapacity says the last refill was refused because the node's
	// budget was spent: the pool is below its target until room frees.
	AtCapacity bool `json:"at_capacity,omitempty"`
	// ClaimNanos is the total time claims took (hits and misses).
	ClaimNanos int64 `json:"claim_ns"`
}

// NDJSON is the media type of streamed answers: one result.Event per
// line, the last of type "result".
const NDJSON = "application/x-ndjson"

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	// Tool is the session's tool; with Snapshot it may be left out (it
	// is the snapshot's), or must be the snapshot's.
	Tool string `json:"tool"`
	// Snapshot, if set, names a snapshot (its id or name) whose files
	// the session's fresh sandbox starts with.
	Snapshot string `json:"snapshot,omitempty"`
	// Volumes are the caller's volumes to attach, writable, each at its
	// path (at most 8; not in or over what airlock builds: /workspace,
	// /tmp, /etc, /usr, ...). A session with volumes gets a sandbox made
	// for it.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// IdleTimeout ends the session after this long without an exec or
	// file call ("10m"); default 10m, at most MaxLifetime.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// MaxLifetime ends the session this long after it began ("1h");
	// default 1h, at most 24h.
	MaxLifetime string `json:"max_lifetime,omitempty"`
}

// SnapshotRequest is the optional body of POST
// /v1/sessions/{id}/snapshots.
type SnapshotRequest struct {
	// Name, if set, names the snapshot among its owner's (1 to 64
	// letters, digits, - _ .).
	Name string `json:"name,omitempty"`
}

// Snapshot describes a snapshot: a session's files (its workspace and
// /tmp) captured as an immutable archive, from which fresh sessions of
// its tool start (POST /v1/sessions with snapshot).
type Snapshot struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Digest is the SHA-256 of its archive.
	Digest string `json:"digest"`
	Tool   string `json:"tool"`
	// Source is the session it was taken of.
	Source string `json:"source"`
	// Size is the bytes of its files; Files how many entries it holds;
	// Skipped what it could not (FIFOs, sockets, devices).
	Size    int64  `json:"size_bytes"`
	Files   int    `json:"files"`
	Skipped int    `json:"skipped,omitempty"`
	Created string `json:"created"`
	// Layered says sessions start from it with nothing copied: the
	// node holds its files unpacked, the lower layer of a new sandbox's
	// /workspace and /tmp (made in the background after the snapshot;
	// until then, and on kernels before 6.6, the files are copied in).
	Layered bool `json:"layered,omitempty"`
}

// ReloadRequest is the (optional) body of POST /v1/reload.
type ReloadRequest struct {
	// ImagesOnly keeps the config the daemon runs and resolves its
	// tools' image names again: what `airlock image import` and `pull`
	// ask after they store an image under a name.
	ImagesOnly bool `json:"images_only,omitempty"`
}

// ReloadReport is the answer of POST /v1/reload: what the daemon's
// config, read again, changed. Tools are named by what happened to each:
// a changed or removed tool's pool drains (its ready sandboxes go; runs
// and sessions that hold one keep it to their end) and a new or changed
// one's fills; a kept tool keeps its pool and its ready sandboxes.
type ReloadReport struct {
	// Config is the file read ("" for the embedded defaults).
	Config  string   `json:"config"`
	Added   []string `json:"added,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Kept    []string `json:"kept,omitempty"`
	// Restart names the settings that changed but take effect only when
	// the daemon restarts (listeners, capacity, the audit log, stores).
	Restart []string `json:"restart,omitempty"`
}

// VolumeMount attaches a volume (its id or name) at Path.
type VolumeMount struct {
	Volume string `json:"volume"`
	Path   string `json:"path"`
}

// VolumeRequest is the body of POST /v1/volumes.
type VolumeRequest struct {
	// Name names it among its owner's volumes.
	Name string `json:"name"`
	// Size is its size ("1GiB"; default 1GiB, 16MiB to 1TiB).
	Size string `json:"size,omitempty"`
}

// Volume describes a volume: a named, size-bounded file system that
// outlives sessions, its owner's only.
type Volume struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Size    int64  `json:"size_bytes"`
	Created string `json:"created"`
}

// ForkRequest is the body of POST /v1/sessions/{id}/fork.
type ForkRequest struct {
	// Count is how many sessions to make, 1 to 100 (default 1).
	Count int `json:"count,omitempty"`
	// MaxLifetime is each new session's ("1h" default, as a new
	// session's).
	MaxLifetime string `json:"max_lifetime,omitempty"`
}

// Forked is one outcome of a fork: the new session, or why it was not
// made.
type Forked struct {
	Session *Session `json:"session,omitempty"`
	Error   *Error   `json:"error,omitempty"`
}

// ResumeRequest is the optional body of POST /v1/sessions/{id}/resume.
type ResumeRequest struct {
	// MaxLifetime, if set, is the least lifetime the resumed session
	// has from now ("30m"); without it, it has what it had left when
	// paused.
	MaxLifetime string `json:"max_lifetime,omitempty"`
	// Files resumes a session whose processes did not survive a restart
	// of the daemon (processes_lost) from its files, in a fresh
	// sandbox; without it such a resume is refused.
	Files bool `json:"files,omitempty"`
}

// Session describes a session (POST /v1/sessions, GET /v1/sessions/{id}).
type Session struct {
	ID        string `json:"id"`
	Tool      string `json:"tool"`
	SandboxID string `json:"sandbox_id"`
	// Node is the cluster node it is on, in a front's lists; empty in a
	// daemon's own.
	Node string `json:"node,omitempty"`
	// State is active, paused or ended; EndReason says why it ended
	// (deleted, idle timeout, max lifetime, paused too long, limit:
	// NAME, sandbox died, shutdown).
	State     string `json:"state"`
	EndReason string `json:"end_reason,omitempty"`
	// PausedAt is when a paused session was paused; its Expires then
	// moves with the clock, since its lifetime stands still.
	PausedAt string `json:"paused_at,omitempty"`
	// ProcessesLost says a paused session came back from a restart of
	// the daemon with its files alone: its processes are gone, and it
	// resumes from its files only when asked to (ResumeRequest.Files).
	ProcessesLost bool   `json:"processes_lost,omitempty"`
	Created       string `json:"created"`
	LastUsed      string `json:"last_used"`
	Expires       string `json:"expires"`
	// Running counts execs in progress.
	Running int `json:"running"`
}

// ExecRequest is the body of POST /v1/sessions/{id}/exec: a RunRequest
// without the tool, which the session fixes.
type ExecRequest struct {
	Argv    []string `json:"argv"`
	Env     Env      `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	Stdin   string   `json:"stdin,omitempty"`
	TTY     *TTYSize `json:"tty,omitempty"`
}

// Session states.
const (
	SessionActive = "active"
	SessionPaused = "paused"
	SessionEnded  = "ended"
)

// AuditEvent is one record of the audit log (GET /v1/audit).
type AuditEvent struct {
	// Node is the node that recorded the event, in a cluster's front's
	// answers (ClusterAuditPage); empty in a daemon's own.
	Node string `json:"node,omitempty"`
	// ID orders events (a node's); it is the cursor for paging and
	// following.
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// Kind is daemon.started, daemon.stopped, sandbox.created,
	// sandbox.claimed, sandbox.destroyed, sandbox.swept, run.started,
	// run.finished, limit.breach, egress, dns, broker, session.created,
	// session.ended, session.file, mcp.call, audit.capped or api.request.
	Kind string `json:"kind"`
	// Tool, Sandbox, Session and Run say what the event concerns; Client
	// who caused it ("unix:uid=0,pid=42" or "token:NAME").
	Tool    string `json:"tool,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	Session string `json:"session,omitempty"`
	Run     string `json:"run,omitempty"`
	Client  string `json:"client,omitempty"`
	// Decision is allow or deny for decisions, the outcome for a finished
	// run (exited, signaled, limit, error), the limit's name for a breach.
	Decision string `json:"decision,omitempty"`
	// Detail holds the kind's own fields.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// AuditPage is the answer of GET /v1/audit.
type AuditPage struct {
	Events []AuditEvent `json:"events"`
	// Next is the cursor to pass as "after" for the following page.
	Next int64 `json:"next"`
}

// ClusterAuditPage is a cluster front's answer of GET /v1/audit: every
// node's events merged in time order, each with its node.
type ClusterAuditPage struct {
	Events []AuditEvent `json:"events"`
	// Next is the cursor to pass as "after" for the following page: the
	// last event taken of each node, opaque.
	Next string `json:"next"`
	// Unreached names the nodes that could not be read: their events are
	// not in this page, and the cursor keeps their place.
	Unreached []string `json:"unreached,omitempty"`
}

// Activity is the body of GET /v1/ps: what runs now, as the caller may
// see it (all of it on the local socket, a token's own on TCP).
type Activity struct {
	// Runs are runs and MCP servers' processes in flight, oldest first.
	Runs []LiveRun `json:"runs"`
	// Sessions are the active sessions.
	Sessions []Session `json:"sessions"`
	// Unreached names the nodes a cluster's front could not ask: what
	// they run is missing here.
	Unreached []string `json:"unreached,omitempty"`
}

// LiveRun is one run or MCP server in flight, with its use so far and
// its ceilings. DELETE /v1/runs/{id} ends it.
type LiveRun struct {
	ID string `json:"id"`
	// Node is the cluster node it is on, in a front's lists; empty in a
	// daemon's own.
	Node string `json:"node,omitempty"`
	// Kind is "run" (a run, an MCP tool call) or "server" (an MCP
	// server's process of a gateway session).
	Kind      string `json:"kind"`
	Tool      string `json:"tool"`
	Client    string `json:"client"`
	SandboxID string `json:"sandbox_id"`
	Started   string `json:"started"`
	AgeMillis int64  `json:"age_ms"`
	// What the sandbox uses now.
	MemoryBytes int64      `json:"memory_bytes"`
	Pids        int64      `json:"pids"`
	CPUMillis   int64      `json:"cpu_ms"`
	DiskBytes   int64      `json:"disk_bytes"`
	Limits      LiveLimits `json:"limits"`
}

// LiveLimits are a live run's main ceilings.
type LiveLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	Pids        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
	TimeMillis  int64 `json:"time_ms"`
}
