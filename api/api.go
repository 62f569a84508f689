// Package api holds the types of airlock's HTTP API (v1) that both the
// daemon and the Go client use. The result of a run is result.Result, the
// object `airlock run --json` prints.
package api

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	// Tool names a tool of the daemon's config.
	Tool string `json:"tool"`
	// Argv is the command; Argv[0] is looked up in the sandbox's PATH.
	Argv []string `json:"argv"`
	// Env adds KEY=VALUE entries to the command's environment.
	Env []string `json:"env,omitempty"`
	// Workdir is the working directory inside; default the tool's.
	Workdir string `json:"workdir,omitempty"`
	// Stdin is fed to the command's standard input.
	Stdin string `json:"stdin,omitempty"`
}

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	// Code is a stable word: invalid, not_found, method_not_allowed,
	// too_large, unavailable, internal.
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
)

// Tool describes a configured tool (GET /v1/tools).
type Tool struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Warm        int      `json:"warm"`
	Egress      []string `json:"egress"`
	Services    []string `json:"services"`
}

// NDJSON is the media type of streamed answers: one result.Event per
// line, the last of type "result".
const NDJSON = "application/x-ndjson"
