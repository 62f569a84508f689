// Package result defines the outcome of one command run in a sandbox: the
// object that `airlock run --json` prints and that the API, MCP server and Go
// client carry unchanged.
package result

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
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
	// LimitCPU is the CPU-time budget (--cpu-time, limits.cpu_time):
	// the CPU bandwidth throttle (--cpu) slows a command, never ends it.
	LimitCPU = "cpu"
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

// PostMortem explains a breach: what airlock read on the host, within a
// small budget, before it destroyed the sandbox (issue 40). Everything in
// it was read, never run; commands are the sandbox's own words, as data.
type PostMortem struct {
	// Killed is the process the kernel's out-of-memory killer ended for
	// a memory breach, as the kernel reported it.
	Killed *Process `json:"killed,omitempty"`
	// Processes are, for a pids breach, the parents with the most
	// children; for any other, the largest processes by resident memory
	// (what was running, for time). At most MaxPostMortemProcesses.
	Processes []Process `json:"processes,omitempty"`
	// Files are, for a disk breach, the largest files in the sandbox's
	// writable directories by the space they take (allocated blocks: a
	// sparse file counts what it holds, not its length). At most
	// MaxPostMortemEntries.
	Files []DiskEntry `json:"files,omitempty"`
	// Directories are, for a disk breach, the directories holding the
	// most directly (not counting their subdirectories' contents): by
	// bytes, or by entries when the breach was of inodes. At most
	// MaxPostMortemEntries.
	Directories []DiskEntry `json:"directories,omitempty"`
	// Note says what could not be read (the budget ran out, processes
	// were already gone).
	Note string `json:"note,omitempty"`
}

// Summary is the post-mortem in one line, for people and models: the
// process killed, the processes read, the largest files and the fullest
// directories ("" when there is nothing).
func (pm *PostMortem) Summary() string {
	if pm == nil {
		return ""
	}
	var parts []string
	if k := pm.Killed; k != nil {
		parts = append(parts, fmt.Sprintf("the kernel killed %s (pid %d, %s resident)", k.Command, k.PID, mib(k.RSSBytes)))
	}
	var ps []string
	for _, p := range pm.Processes {
		if p.Children > 0 {
			ps = append(ps, fmt.Sprintf("%s (pid %d, %d children)", p.Command, p.PID, p.Children))
		} else {
			ps = append(ps, fmt.Sprintf("%s (pid %d, %s)", p.Command, p.PID, mib(p.RSSBytes)))
		}
	}
	var fs []string
	for _, f := range pm.Files {
		fs = append(fs, fmt.Sprintf("%s (%s)", f.Path, mib(f.Bytes)))
	}
	if len(fs) > 0 {
		parts = append(parts, "largest files: "+strings.Join(fs, ", "))
	}
	var ds []string
	for _, d := range pm.Directories {
		ds = append(ds, fmt.Sprintf("%s (%s in %d %s)", d.Path, mib(d.Bytes), d.Entries, plural(d.Entries, "entry", "entries")))
	}
	if len(ds) > 0 {
		parts = append(parts, "fullest directories: "+strings.Join(ds, ", "))
	}
	if len(ps) > 0 {
		parts = append(parts, "running: "+strings.Join(ps, ", "))
	}
	if pm.Note != "" {
		parts = append(parts, "("+pm.Note+")")
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Breach is a limit.breach audit event's detail: the limit, and what
// explains it.
type Breach struct {
	*Limit
	PostMortem *PostMortem `json:"post_mortem,omitempty"`
}

// MaxPostMortemProcesses bounds PostMortem.Processes.
const MaxPostMortemProcesses = 5

// MaxPostMortemEntries bounds PostMortem.Files and Directories.
const MaxPostMortemEntries = 5

// DiskEntry is one file or directory of a disk breach's post-mortem.
type DiskEntry struct {
	// Path is where the sandbox sees it (/tmp/cache/big.bin), its
	// own words as data: what is not printable text is "?", and a path
	// over 256 bytes keeps its start and end around "…".
	Path string `json:"path"`
	// Bytes is the space it takes: for a directory, its files' (and
	// its subdirectories' own entries), not its subdirectories'
	// contents.
	Bytes int64 `json:"bytes"`
	// Entries is, for a directory, how many entries it holds.
	Entries int `json:"entries,omitempty"`
}

// Process is one process of a post-mortem.
type Process struct {
	// PID is the process's id on the host.
	PID int `json:"pid"`
	// Command is its command line (arguments joined by spaces, at most
	// 256 bytes), or its name in brackets when that is all there was.
	Command string `json:"command"`
	// RSSBytes is its resident memory.
	RSSBytes int64 `json:"rss_bytes,omitempty"`
	// Children is how many of the sandbox's processes it is the parent
	// of.
	Children int `json:"children,omitempty"`
}

// String renders the limit the way the CLI prints it.
func (l *Limit) String() string {
	unit := l.Unit
	if unit == UnitMillis {
		unit = "ms"
	}
	name := l.Name
	if name == LimitCPU {
		// Not the --cpu throttle, which never ends a run.
		name = "cpu time"
	}
	return fmt.Sprintf("%s (ceiling %d %s, observed %d)", name, l.Ceiling, unit, l.Observed)
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
	// PostMortem, with Limit, is what airlock read on the host to explain
	// the breach before it destroyed the sandbox.
	PostMortem *PostMortem `json:"post_mortem,omitempty"`
	// Error is set when Outcome is error, and may explain a signaled
	// outcome that was not the command's doing (a run ended by airlock
	// kill). It is written for the caller and never holds host paths or
	// secrets.
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
	// Code says why the call was refused or cut short, for machines: one
	// of the Broker* codes below; empty for a call relayed whole.
	Code string `json:"code,omitempty"`
	// Reason says the same for people: a sentence that may change.
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

// Broker event codes (BrokerEvent.Code): why a call was refused or cut
// short. The set is closed: a new code is a change of the wire format.
const (
	// BrokerNoService: the path names no service, or one the tool is not
	// given.
	BrokerNoService = "no_service"
	// BrokerNoOperation: no operation of the service matches the method
	// and path.
	BrokerNoOperation = "no_operation"
	// BrokerMisdirected: a transparently brokered request names a host
	// (or port) other than the one its connection was made for.
	BrokerMisdirected = "misdirected"
	// BrokerBadPath: the request target is not a plain path below the
	// broker (absolute form, "..", encoded separators, NUL), or cannot be
	// sent upstream as one.
	BrokerBadPath = "bad_path"
	// BrokerOverride: a method override header (X-HTTP-Method-Override…).
	BrokerOverride = "override"
	// BrokerQuery: a query parameter the operation does not list, or a
	// malformed query.
	BrokerQuery = "query"
	// BrokerTooLarge: the request body is over the operation's cap.
	BrokerTooLarge = "too_large"
	// BrokerContentType: a content type the operation does not list, or
	// more than one Content-Type.
	BrokerContentType = "content_type"
	// BrokerBadRequest: the request body could not be read, or the call
	// could not be made into a request upstream.
	BrokerBadRequest = "bad_request"
	// BrokerRate: over the operation's rate of calls per minute.
	BrokerRate = "rate"
	// BrokerNoSecret: the service's credential is not available on the
	// host.
	BrokerNoSecret = "no_secret"
	// BrokerShortSecret: the credential is too short to be kept out of
	// the answers, so it is not used.
	BrokerShortSecret = "short_secret"
	// BrokerAddress: the upstream's address was refused by the egress
	// address checks (metadata, link-local, private…).
	BrokerAddress = "address"
	// BrokerUpstream: the upstream could not be reached, or its answer
	// ended early.
	BrokerUpstream = "upstream"
	// BrokerEncoding: the upstream answered with a content or transfer
	// coding, which cannot be checked for the secret.
	BrokerEncoding = "encoding"
	// BrokerPartial: the upstream answered with part of a resource (206)
	// to a call without a Range.
	BrokerPartial = "partial"
	// BrokerResponseTooLarge: the answer is over the operation's cap:
	// refused when its length says so, else cut.
	BrokerResponseTooLarge = "response_too_large"
	// BrokerClosing: the sandbox's broker is closing.
	BrokerClosing = "closing"
)

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

// Egress event codes (EgressEvent.Code): why a decision went as it did.
// The set is closed: a new code is a change of the wire format.
const (
	// EgressNotAllowed: no destination allows the name or address, or
	// not on that port.
	EgressNotAllowed = "not_allowed"
	// EgressInvalidHost: the host is neither a valid name nor a valid
	// address (a number that is not an address, a zone, bad syntax, the
	// root name).
	EgressInvalidHost = "invalid_host"
	// EgressMetadata: a cloud metadata address or name, in any spelling
	// (never allowed).
	EgressMetadata = "metadata"
	// EgressLinkLocal: a link-local address, or an IPv6 form of one
	// (never allowed).
	EgressLinkLocal = "link_local"
	// EgressNotUnicast: an unspecified, multicast or broadcast address,
	// or an IPv6 form of one (never allowed).
	EgressNotUnicast = "not_unicast"
	// EgressPrivate: a loopback, private, CGNAT or reserved address, or an
	// IPv6 form embedding an IPv4 address, for a destination without
	// private: true.
	EgressPrivate = "private"
	// EgressNotPinned: the name has no pinned addresses and this
	// sandbox's names are not looked up on the host.
	EgressNotPinned = "not_pinned"
	// EgressLookupFailed: the host could not resolve the name.
	EgressLookupFailed = "lookup_failed"
	// EgressCapped: a per-sandbox cap was reached (connections, bytes,
	// names with a transparent address, names under wildcards, DNS
	// queries a second). On an allowed connection: it was cut.
	EgressCapped = "capped"
	// EgressUpstreamFailed: the request was allowed but the destination
	// could not be reached, or failed to answer.
	EgressUpstreamFailed = "upstream_failed"
	// EgressMalformed: not a request the gateway serves in that form: an
	// origin-form or non-http proxy request, an authority without a valid
	// port, CONNECT on a transparent connection, a malformed TLS
	// ClientHello or DNS message.
	EgressMalformed = "malformed"
	// EgressSilent: the client sent nothing before the wait ran out (a
	// server-first protocol needs opaque: true).
	EgressSilent = "silent"
	// EgressClosed: the client closed before it sent anything; nothing
	// was refused.
	EgressClosed = "closed"
	// EgressECH: a TLS ClientHello offering Encrypted Client Hello, whose
	// real server name cannot be checked.
	EgressECH = "ech"
	// EgressNoSNI: a TLS ClientHello without a server name.
	EgressNoSNI = "no_sni"
	// EgressSNIMismatch: a TLS ClientHello for another name than the
	// connection's destination.
	EgressSNIMismatch = "sni_mismatch"
	// EgressNotHTTP1: a transparent connection, or a CONNECT tunnel to
	// a name, carrying neither TLS nor HTTP/1 (another protocol, HTTP/2
	// without TLS).
	EgressNotHTTP1 = "not_http1"
	// EgressHostMismatch: an HTTP request on a transparent connection or
	// in a CONNECT tunnel naming another host than the connection's.
	EgressHostMismatch = "host_mismatch"
	// EgressCertRefused: on a connection to a name brokered
	// transparently, the client refused the certificate airlock
	// answered with (its sandbox's own authority's): the client pins
	// certificates or does not read the trust bundle.
	EgressCertRefused = "cert_refused"
	// EgressQueryType: a DNS query of a class or type not served (only
	// IN A and AAAA are).
	EgressQueryType = "query_type"
	// EgressNoIPv6: an allowed AAAA query, answered with no address (the
	// transparent addresses are IPv4).
	EgressNoIPv6 = "no_ipv6"
	// EgressInternal: airlock could not serve the request itself.
	EgressInternal = "internal"
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
	// Code says why a request was refused, or why an allowed one ended
	// early or was answered as it was, for machines: one of the Egress*
	// codes below; empty for an allowed request with nothing to note.
	Code string `json:"code,omitempty"`
	// Reason says why the decision went as it did, or why an allowed
	// connection ended early, for people: a sentence that may change.
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
