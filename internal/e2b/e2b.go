// Package e2b holds the wire forms of the E2B sandbox API that airlock
// serves (docs/e2b.md): the control plane's JSON, and the sandbox-side
// ("envd") calls, which are Connect RPC in JSON, with their 5-byte
// envelopes. It is protocol only: the daemon maps the calls onto
// sessions. What the official SDK sends was read from its code (npm
// `e2b` 2.51.0) and is checked by driving the daemon with it.
package e2b

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/httpx"
)

// EnvdVersion is the envd version airlock answers with. The SDKs (npm
// `e2b` 2.51.0, Python `e2b` 2.63.0) gate features on it: 0.1.4
// recursive watches, 0.3.0 a command without stdin, 0.4.0 and later
// send no user unless one is asked for, 0.5.2 has CloseStdin, 0.5.7
// octet-stream uploads, 0.6.2 file metadata (X-Metadata-* headers kept
// as user.e2b.* extended attributes), 0.6.3 watch events with their
// entry (includeEntry), 0.6.4 watches on network mounts
// (allowNetworkMounts, moot in a sandbox that has none). No SDK gates
// anything later, so nothing is claimed beyond the last gate served.
const EnvdVersion = "0.6.4"

// EnvdPort is the port the SDK names in E2b-Sandbox-Port.
const EnvdPort = "49983"

// CreateRequest is the body of POST /v2/sandboxes.
type CreateRequest struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int              `json:"timeout,omitempty"` // seconds
	Metadata   map[string]string `json:"metadata,omitempty"`
	EnvVars    map[string]string `json:"envVars,omitempty"`
	// AllowInternetAccess and Network may only narrow the tool's egress.
	AllowInternetAccess *bool          `json:"allow_internet_access,omitempty"`
	Network             *Network       `json:"network,omitempty"`
	MCP                 map[string]any `json:"mcp,omitempty"`
	AutoPause           *bool          `json:"autoPause,omitempty"`
	Secure              *bool          `json:"secure,omitempty"`
	// VolumeMounts attach the caller's volumes, by name.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// VolumeMount is one of a sandbox's volumes: its name, and where the
// sandbox sees it (SandboxVolumeMount).
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// NewVolume is the body of POST /volumes. E2B's has no size: a volume
// is the node's default size.
type NewVolume struct {
	Name string `json:"name"`
}

// Volume is one element of GET /volumes.
type Volume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// VolumeAndToken is the answer of POST /volumes and GET
// /volumes/{volumeID}: the volume and the token of E2B's volume content
// API, which airlock does not serve (the token opens nothing).
type VolumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

// AllTraffic is the SDKs' ALL_TRAFFIC: every IPv4 destination.
const AllTraffic = "0.0.0.0/0"

// Network is the create request's network section.
type Network struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// Rules are per-host transforms of the sandbox's requests: the
	// host, and what to do to each request to it.
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one of a host's network rules.
type NetworkRule struct {
	Transform *NetworkTransform `json:"transform,omitempty"`
}

// NetworkTransform is what a rule does to a request: headers to set.
type NetworkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// Sandbox is the answer of create and connect.
type Sandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	Alias              string  `json:"alias,omitempty"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// Detail is the answer of GET /sandboxes/{id}, and one element of the
// list.
type Detail struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	EnvdVersion string            `json:"envdVersion"`
	State       string            `json:"state"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Lifecycle   *Lifecycle        `json:"lifecycle,omitempty"`
	// VolumeMounts are the volumes the sandbox was created with.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// Lifecycle is what a sandbox does on timeout ("kill" or "pause") and
// whether traffic resumes it once paused.
type Lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// TimeoutRequest is the body of POST /sandboxes/{id}/timeout and of
// connect.
type TimeoutRequest struct {
	Timeout *int `json:"timeout,omitempty"` // seconds
}

// SnapshotRequest is the body of POST /sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
	// Memory true asks for the processes and memory too (E2B's default
	// when it is left out, a "full" snapshot).
	Memory *bool `json:"memory,omitempty"`
}

// SnapshotInfo is the answer of POST /sandboxes/{id}/snapshots, and one
// element of GET /snapshots: the id create takes as its templateID, and
// the snapshot's names.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// ForkRequest is the body of POST /sandboxes/{id}/fork.
type ForkRequest struct {
	Count   *int `json:"count,omitempty"`
	Timeout *int `json:"timeout,omitempty"` // seconds
}

// ForkResult is one fork's outcome in the answer of POST
// /sandboxes/{id}/fork: the sandbox, as create answers it, or the error
// that kept it from starting.
type ForkResult struct {
	Sandbox *Sandbox  `json:"sandbox,omitempty"`
	Error   *APIError `json:"error,omitempty"`
}

// APIError is the control plane's error body: the SDK reads code (the
// HTTP status again) to tell a missing sandbox from other failures.
type APIError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// WriteAPIError answers a control-plane call with an error.
func WriteAPIError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(APIError{Code: status, Message: msg})
}

// Connect error codes (the JSON names of Connect's codes).
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeUnauthenticated    = "unauthenticated"
	CodePermissionDenied   = "permission_denied"
	CodeResourceExhaust    = "resource_exhausted"
	CodeUnimplemented      = "unimplemented"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
	CodeAlreadyExists      = "already_exists"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeFailedPrecondition = "failed_precondition"
)

// connectStatus is the HTTP status of each Connect code in a unary
// answer.
var connectStatus = map[string]int{
	CodeInvalidArgument: 400, CodeUnauthenticated: 401, CodePermissionDenied: 403, CodeNotFound: 404,
	CodeAlreadyExists: 409, CodeResourceExhaust: 429, CodeDeadlineExceeded: 504, CodeUnimplemented: 501, CodeUnavailable: 503, CodeInternal: 500,
	CodeFailedPrecondition: 400,
}

// RPCError is a Connect error.
type RPCError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *RPCError) Error() string { return e.Code + ": " + e.Message }

// Errorf makes a Connect error.
func Errorf(code, format string, a ...any) *RPCError {
	return &RPCError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// WriteUnaryError answers a unary Connect call with err (an *RPCError, or
// internal).
func WriteUnaryError(w http.ResponseWriter, err error) {
	var re *RPCError
	if !errors.As(err, &re) {
		re = &RPCError{Code: CodeInternal, Message: err.Error()}
	}
	status, ok := connectStatus[re.Code]
	if !ok {
		status = 500
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(re)
}

// WriteUnary answers a unary Connect call with v.
func WriteUnary(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// Envelope flags.
const (
	FlagCompressed = 0x01
	FlagEndStream  = 0x02
)

// MaxMessage bounds one enveloped message a client sends.
const MaxMessage = 1 << 20

// ErrTooLarge is the refusal of a message over MaxMessage.
var ErrTooLarge = fmt.Errorf("message over %d KiB", MaxMessage>>10)

// ReadEnvelope reads one enveloped message: its flags and its JSON.
// A message over max bytes is refused before it is read.
func ReadEnvelope(r io.Reader, max int) (flags byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("envelope cut short")
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(max) {
		return 0, nil, ErrTooLarge
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, errors.New("envelope cut short")
	}
	return hdr[0], msg, nil
}

// AppendEnvelope appends msg as one envelope with flags.
func AppendEnvelope(b []byte, flags byte, msg []byte) []byte {
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// ReadRequest reads the one message of a server-streaming call's request
// body into v: uncompressed, not an end of stream, JSON.
func ReadRequest(r io.Reader, v any) error {
	flags, msg, err := ReadEnvelope(r, MaxMessage)
	switch {
	case errors.Is(err, ErrTooLarge):
		return Errorf(CodeResourceExhaust, "request %v", err)
	case err != nil:
		return Errorf(CodeInvalidArgument, "request: %v", err)
	case flags&FlagCompressed != 0:
		return Errorf(CodeUnimplemented, "compressed messages are not supported")
	case flags&FlagEndStream != 0:
		return Errorf(CodeInvalidArgument, "request: an end of stream where a message was expected")
	}
	if err := json.Unmarshal(msg, v); err != nil {
		return Errorf(CodeInvalidArgument, "request: %s", httpx.DescribeJSON(err))
	}
	return nil
}

// EndStream is the last envelope's message: empty, or the call's error.
type EndStream struct {
	Error *RPCError `json:"error,omitempty"`
}

// ProcessConfig is what to start.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest is process.Process/Start's request.
type StartRequest struct {
	Process *ProcessConfig `json:"process"`
	PTY     *struct {
		Size struct {
			Cols uint32 `json:"cols"`
			Rows uint32 `json:"rows"`
		} `json:"size"`
	} `json:"pty,omitempty"`
	Tag   *string `json:"tag,omitempty"`
	Stdin *bool   `json:"stdin,omitempty"`
}

// Selector names a process: by pid, or by tag.
type Selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// SignalRequest is process.Process/SendSignal's request.
type SignalRequest struct {
	Process Selector `json:"process"`
	Signal  string   `json:"signal"`
}

// Signals are the signals SendSignal names.
var Signals = map[string]int{"SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15}

// ProcessEvent is one event of a process's stream.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent says the process runs.
type StartEvent struct {
	PID uint32 `json:"pid"`
}

// DataEvent is output: bytes are base64 in JSON.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

// EndEvent is the process's end: a non-zero exit code makes the SDK
// raise CommandExitError with Error as its message.
type EndEvent struct {
	ExitCode int32  `json:"exitCode,omitempty"`
	Exited   bool   `json:"exited"`
	Status   string `json:"status"`
	Error    string `json:"error,omitempty"`
}

// StreamEvent wraps a ProcessEvent as Start's and Connect's responses do.
type StreamEvent struct {
	Event ProcessEvent `json:"event"`
}

// ProcessInfo is one process of List's answer.
type ProcessInfo struct {
	Config ProcessConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// WrittenFile is one element of POST /files's answer.
type WrittenFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
	// Metadata is the file's metadata as kept (FileMetadata), if any.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// EntryInfo describes a file, as the filesystem calls answer.
type EntryInfo struct {
	Name         string `json:"name"`
	Type         string `json:"type"`
	Path         string `json:"path"`
	Size         string `json:"size"` // an int64, as protobuf's JSON writes one
	Mode         uint32 `json:"mode"`
	Permissions  string `json:"permissions"`
	Owner        string `json:"owner"`
	Group        string `json:"group"`
	ModifiedTime string `json:"modifiedTime,omitempty"` // Timestamp
	// SymlinkTarget is, for a symlink, the path it resolves to with
	// every link followed (envd's filepath.EvalSymlinks), or the link's
	// own path when it resolves to nothing.
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
	// Metadata is the file's user metadata (FileMetadata), if any.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ErrAmbiguous refuses a signed URL whose path or user holds a ':'.
var ErrAmbiguous = errors.New("a signed URL's path and user may not contain ':' (the signature could not tell them from the operation)")

// CheckSigned says whether a signed URL's path and user may be checked
// against a signature. The SDK signs "path:op:user:token[:expires]"
// without escaping, so a ':' inside the path or the user would let one
// string be read as another split: a download URL for the path
// "x:write:" (user "") signs "x:write::read::token", exactly what an
// upload of "x" by the user ":read:" signs, and would work as that
// upload. The scheme is the SDK's (it signs client side), so it cannot
// change; instead the server refuses the fields that make it ambiguous.
// With no ':' in the path or the user, and none in the operation or the
// token (hex), the string the server hashes has exactly four fields, or
// five when an expiry (digits, at most 19: an int64) follows, never a
// 48-character token. A signed string equal to it then has the same
// fields in the same places whatever the signer put in its own path and
// user: the operation is the second field, so a signature made for one
// operation never verifies for the other. A URL for a file whose name
// holds ':' cannot be signed; the SDK's files calls (with the access
// token) still reach it.
func CheckSigned(path, user string) error {
	if strings.ContainsRune(path, ':') || strings.ContainsRune(user, ':') {
		return ErrAmbiguous
	}
	return nil
}

// Signature is the signature of a download (op "read") or upload ("write")
// URL of path for user, made with a sandbox's envdAccessToken, valid
// until expires (Unix seconds; 0 for ever), as the SDK makes it:
// "v1_" and the unpadded base64 of SHA-256 over
// "path:op:user:token[:expires]".
func Signature(path, op, user, token string, expires int64) string {
	sum := sha256.Sum256([]byte(signed(path, op, user, token, expires)))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// signed is the string a signature hashes.
func signed(path, op, user, token string, expires int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expires != 0 {
		raw += ":" + strconv.FormatInt(expires, 10)
	}
	return raw
}
