// Package result defines the outcome of one command run in a sandbox: the
// object that `airlock run --json` prints and that the API, MCP server and Go
// client carry unchanged.
package result

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Outcome says how a run ended. Every run ends in exactly one.
type Outcome string

// The four outcomes.
const (
	// Exited: the command exited on its own; ExitCode holds its status.
	Exited Outcome = "exited"
	// Signaled: the command was killed by a signal; Signal holds it.
	Signaled Outcome = "signaled"
	// LimitExceeded: a ceiling was breached and the sandbox destroyed;
	// Limit names it.
	LimitExceeded Outcome = "limit"
	// Error: airlock itself failed; Error says why.
	Error Outcome = "error"
)

// Limit names. They are part of the wire format.
const (
	LimitMemory = "memory"
	LimitPids   = "pids"
	LimitDisk   = "disk"
	LimitFDs    = "fds"
	LimitOutput = "output"
	LimitTime   = "time"
	LimitCPU    = "cpu"
)

// Units for Limit.Ceiling and Limit.Observed.
const (
	UnitBytes  = "bytes"
	UnitCount  = "count"
	UnitInodes = "inodes"
	UnitMillis = "ms"
)

// Limit describes a breached ceiling.
type Limit struct {
	// Name is one of the Limit* constants.
	Name string `json:"name"`
	// Ceiling is the configured value, in Unit.
	Ceiling int64 `json:"ceiling"`
	// Observed is what was measured when the breach was detected, in Unit.
	Observed int64 `json:"observed"`
	// Unit is bytes, count, inodes or ms.
	Unit string `json:"unit"`
}

// String renders the limit the way the CLI prints it.
func (l *Limit) String() string {
	unit := l.Unit
	if unit == UnitMillis {
		unit = "ms"
	}
	return fmt.Sprintf("%s (ceiling %d %s, observed %d)", l.Name, l.Ceiling, unit, l.Observed)
}

// LimitError is the error form of a breach, for callers that use errors.
type LimitError struct{ Limit Limit }

func (e *LimitError) Error() string { return "limit exceeded: " + e.Limit.String() }

// Usage is what the whole sandbox consumed during the run.
type Usage struct {
	WallMillis      int64 `json:"wall_ms"`
	CPUMillis       int64 `json:"cpu_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	PidsPeak        int64 `json:"pids_peak"`
	DiskPeakBytes   int64 `json:"disk_peak_bytes"`
}

// Sample is one resource reading of the whole sandbox, taken from the host.
type Sample struct {
	// Millis is the time since the command started.
	Millis      int64 `json:"t_ms"`
	MemoryBytes int64 `json:"memory_bytes"`
	Pids        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
	DiskInodes  int64 `json:"disk_inodes"`
	CPUMillis   int64 `json:"cpu_ms"`
}

// Output is captured command output. It is a JSON string when the bytes are
// valid UTF-8 and an object {"base64": "..."} otherwise, so nothing is lost.
type Output []byte

// MarshalJSON implements json.Marshaler.
func (o Output) MarshalJSON() ([]byte, error) {
	if utf8.Valid(o) {
		return json.Marshal(string(o))
	}
	return json.Marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString(o)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (o *Output) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*o = Output(s)
		return nil
	}
	var obj struct {
		Base64 string `json:"base64"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("output: want a string or {\"base64\":...}: %w", err)
	}
	d, err := base64.StdEncoding.DecodeString(obj.Base64)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	*o = d
	return nil
}

// Result is the outcome of one run.
type Result struct {
	SandboxID string `json:"sandbox_id"`
	// RunID names the run in the daemon's audit log (its run.started and
	// run.finished events); empty outside the daemon.
	RunID   string  `json:"run_id,omitempty"`
	Outcome Outcome `json:"outcome"`
	// ExitCode is the command's exit status when Outcome is exited, else 0.
	ExitCode int `json:"exit_code"`
	// Signal is the number of the signal that killed the command when
	// Outcome is signaled, else 0.
	Signal int `json:"signal"`
	// Limit is set when Outcome is limit.
	Limit *Limit `json:"limit"`
	// Error is set when Outcome is error. It is written for the caller and
	// never holds host paths or secrets.
	Error string `json:"error"`
	// Stdout and Stderr are the captured output (only when captured).
	Stdout Output `json:"stdout"`
	Stderr Output `json:"stderr"`
	// Truncated reports that output was cut at the output ceiling.
	Truncated bool  `json:"truncated"`
	Usage     Usage `json:"usage"`
	// Evidence holds the last resource samples, oldest first.
	Evidence []Sample `json:"evidence"`
	// Egress lists the sandbox's network decisions (proxy, transparent and
	// DNS), oldest first; at most MaxEgressEvents, after which
	// EgressDropped counts the rest.
	Egress        []EgressEvent `json:"egress"`
	EgressDropped int           `json:"egress_dropped,omitempty"`
	// Broker lists the calls the sandbox made to the credential broker,
	// allowed or refused, oldest first; at most MaxEgressEvents, after
	// which BrokerDropped counts the rest.
	Broker        []BrokerEvent `json:"broker"`
	BrokerDropped int           `json:"broker_dropped,omitempty"`
}

// BrokerEvent is one call to the credential broker. It never holds the
// secret or a request or response body.
type BrokerEvent struct {
	Time    time.Time `json:"time"`
	Tool    string    `json:"tool,omitempty"`
	Sandbox string    `json:"sandbox"`
	// Service is the service named in the call's path ("" if none).
	Service string `json:"service"`
	// Operation is the matched operation as configured, e.g.
	// "GET /repos/{owner}/{repo}/issues"; "" when none matched.
	Operation string `json:"operation,omitempty"`
	Method    string `json:"method"`
	// Path is the normalised path below the service, or the raw path
	// (quoted and shortened) when it was refused before normalising.
	Path  string `json:"path"`
	Allow bool   `json:"allow"`
	// Reason says why the call was refused or cut short.
	Reason string `json:"reason,omitempty"`
	// Status is the status the sandbox got: the upstream's, or the
	// broker's own for a refusal.
	Status int `json:"status"`
	// Upstream is true when the call reached the upstream.
	Upstream bool `json:"upstream"`
	// BytesOut is the request body sent upstream, BytesIn the response
	// body returned to the sandbox.
	BytesOut   int64 `json:"bytes_out"`
	BytesIn    int64 `json:"bytes_in"`
	DurationMs int64 `json:"duration_ms"`
}

// MaxEgressEvents bounds Result.Egress; the live event stream carries all.
const MaxEgressEvents = 1000

// Egress event kinds.
const (
	// EgressProxy: a request to the HTTP proxy (CONNECT or absolute-form).
	EgressProxy = "proxy"
	// EgressTransparent: a connection to a name's transparent address.
	EgressTransparent = "transparent"
	// EgressDNS: a query to the sandbox's resolver.
	EgressDNS = "dns"
)

// EgressEvent is one egress decision: a connection the sandbox asked for
// (logged when it ends, with what it carried) or a DNS query.
type EgressEvent struct {
	// Time is when the decision was made.
	Time time.Time `json:"time"`
	// Kind is proxy, transparent or dns.
	Kind    string `json:"kind"`
	Tool    string `json:"tool,omitempty"`
	Sandbox string `json:"sandbox"`
	// Destination is what the sandbox asked for: host:port, or the name
	// queried.
	Destination string `json:"destination"`
	// Method is the HTTP method (CONNECT, GET, ...), the TLS server name
	// check ("tls" or "plain") for transparent connections, or the query
	// type for DNS.
	Method string `json:"method,omitempty"`
	// Address is the address airlock dialed (ip:port), or the address a
	// DNS answer handed out.
	Address string `json:"address,omitempty"`
	Allow   bool   `json:"allow"`
	// Reason says why the decision went as it did, or why an allowed
	// connection ended early.
	Reason string `json:"reason,omitempty"`
	// Status is the HTTP status the proxy answered with, if any.
	Status int `json:"status,omitempty"`
	// BytesOut went from the sandbox to the destination, BytesIn back.
	BytesOut   int64 `json:"bytes_out"`
	BytesIn    int64 `json:"bytes_in"`
	DurationMs int64 `json:"duration_ms"`
}

// Event is one line of a live NDJSON event stream.
type Event struct {
	// Type is stdout, stderr, sample, egress, broker or result.
	Type string `json:"type"`
	// Millis is the time since the command started.
	Millis int64        `json:"t_ms"`
	Data   Output       `json:"data,omitempty"`
	Sample *Sample      `json:"sample,omitempty"`
	Egress *EgressEvent `json:"egress,omitempty"`
	Broker *BrokerEvent `json:"broker,omitempty"`
	Result *Result      `json:"result,omitempty"`
}

// Event types.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventSample = "sample"
	EventEgress = "egress"
	EventBroker = "broker"
	EventResult = "result"
)
