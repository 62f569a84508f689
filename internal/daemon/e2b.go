package daemon

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// The E2B-compatible API (docs/e2b.md): an E2B sandbox is a session, its
// template a tool, its API key a token. Both the control plane and the
// sandbox-side ("envd") calls are served on one listener, server.e2b.

// e2bDefaultTimeout is a sandbox's life when create names none, as E2B's.
const e2bDefaultTimeout = 300 * time.Second

// e2bSandbox is the E2B side of a session.
type e2bSandbox struct {
	s        *session
	token    string // envdAccessToken: the envd calls' credential
	metadata map[string]string
	env      []string // envVars, for every command
	limits   sandbox.Limits

	// mu guards procs and nextPID.
	mu      sync.Mutex
	procs   map[uint32]*e2bProc
	nextPID uint32
}

// e2bProc is a command started through process.Process/Start.
type e2bProc struct {
	pid    uint32
	config e2b.ProcessConfig
	signal chan unix.Signal
	// stdin, for a command started with stdin, takes SendInput's bytes;
	// CloseStdin closes it.
	stdin *io.PipeWriter

	// mu guards subs: the streams its output goes to (Start's, and each
	// Connect's). done is closed once it has ended, with end (or
	// endErr) set before.
	mu     sync.Mutex
	subs   map[*e2bStream]struct{}
	done   chan struct{}
	end    *e2b.EndEvent
	endErr error
}

// send gives ev to every stream attached to p.
func (p *e2bProc) send(ev e2b.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*e2bStream, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.event(ev)
	}
}

// attach adds st to p's streams; the returned func removes it.
func (p *e2bProc) attach(st *e2bStream) func() {
	p.mu.Lock()
	p.subs[st] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.subs, st)
		p.mu.Unlock()
	}
}

// finish ends a stream as p ended: its end event and the end of stream,
// or the error that ended it.
func (p *e2bProc) finish(st *e2bStream) {
	if p.endErr != nil {
		st.end(p.endErr)
		return
	}
	st.end(nil, e2b.ProcessEvent{End: p.end})
}

// e2bTable holds the daemon's E2B sandboxes by id (the session's).
type e2bTable struct {
	mu sync.Mutex // guards m
	m  map[string]*e2bSandbox
}

func (d *Daemon) e2bRoutes() http.Handler {
	mux := http.NewServeMux()
	api := func(h func(http.ResponseWriter, *http.Request, *caller)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c := d.e2bCaller(w, r)
			if c == nil {
				return
			}
			h(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)), c)
		}
	}
	mux.HandleFunc("POST /v2/sandboxes", api(d.e2bCreate))
	mux.HandleFunc("GET /v2/sandboxes", api(d.e2bList))
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", api(d.e2bConnect))
	mux.HandleFunc("GET /sandboxes/{id}", api(d.e2bGet))
	mux.HandleFunc("DELETE /sandboxes/{id}", api(d.e2bKill))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", api(d.e2bSetTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/pause", api(func(w http.ResponseWriter, r *http.Request, c *caller) {
		e2b.WriteAPIError(w, http.StatusNotImplemented, "airlock does not pause sandboxes: a sandbox is used and destroyed (docs/e2b.md)")
	}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /process.Process/Start", d.e2bStart)
	mux.HandleFunc("POST /process.Process/Connect", d.e2bProcConnect)
	mux.HandleFunc("POST /process.Process/List", d.e2bUnary(d.e2bProcList))
	mux.HandleFunc("POST /process.Process/SendSignal", d.e2bUnary(d.e2bSignal))
	mux.HandleFunc("POST /process.Process/SendInput", d.e2bUnary(d.e2bInput))
	mux.HandleFunc("POST /process.Process/CloseStdin", d.e2bUnary(d.e2bCloseStdin))
	d.e2bFSRoutes(mux)
	mux.HandleFunc("GET /files", d.e2bReadFile)
	mux.HandleFunc("POST /files", d.e2bWriteFile)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, ".") && r.Header.Get("Connect-Protocol-Version") != "" {
			e2b.WriteUnaryError(w, e2b.Errorf(e2b.CodeUnimplemented, "%s is not served by airlock (docs/e2b.md lists what is)", path.Clean(r.URL.Path)))
			return
		}
		e2b.WriteAPIError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s %s", r.Method, path.Clean("/"+r.URL.Path)))
	})
	return d.counted(recoverer(mux))
}

// e2bCaller checks the API key; it answers 401 itself when there is no
// valid one.
func (d *Daemon) e2bCaller(w http.ResponseWriter, r *http.Request) *caller {
	if v := r.Header.Get("X-API-KEY"); v != "" {
		if t := d.tokens.match(v); t != nil {
			c := &caller{name: "token:" + t.Name, token: t}
			if seen, ok := r.Context().Value(seenKey{}).(*caller); ok {
				*seen = *c
			}
			return c
		}
	}
	d.counts.unauthorized.Add(1)
	if d.slowFailures(w, r) {
		return nil
	}
	e2b.WriteAPIError(w, http.StatusUnauthorized, "a valid API key is required (X-API-KEY: an airlock token)")
	return nil
}

// e2bDecode reads a control-plane body (at most 1 MiB) into v.
func e2bDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		e2b.WriteAPIError(w, http.StatusBadRequest, "read the body: "+err.Error())
	case len(b) > maxBody:
		e2b.WriteAPIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d KiB", maxBody>>10))
	case len(strings.TrimSpace(string(b))) == 0:
		return true
	default:
		if err := json.Unmarshal(b, v); err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, "the body is not valid JSON of this call: "+err.Error())
			return false
		}
		return true
	}
	return false
}

// e2bTimeout reads a timeout in seconds: absent is def, and it may not be
// under a second or over the longest session.
func e2bTimeout(secs *int, def time.Duration) (time.Duration, error) {
	if secs == nil {
		return def, nil
	}
	// Checked before the multiplication, which could overflow into range.
	if *secs < 1 || *secs > int(maxLife/time.Second) {
		return 0, fmt.Errorf("timeout %d s: want 1 to %d seconds", *secs, int(maxLife.Seconds()))
	}
	return time.Duration(*secs) * time.Second, nil
}

// e2bRefused are create's options airlock does not honour, each refused
// rather than ignored.
var e2bRefused = map[string]string{
	"mcp":          "an MCP gateway in the sandbox is not supported; configure MCP servers in airlock (docs/mcp.md)",
	"autoPause":    "pausing is not supported: a sandbox is used and destroyed",
	"autoResume":   "pausing is not supported: a sandbox is used and destroyed",
	"volumeMounts": "volumes are not supported; use the files API",
	"iam":          "identity tokens are not supported; airlock's credential broker attaches credentials at the edge (docs/config.md, services)",
}

func (d *Daemon) e2bCreate(w http.ResponseWriter, r *http.Request, c *caller) {
	var raw map[string]json.RawMessage
	if !e2bDecode(w, r, &raw) {
		return
	}
	for k, why := range e2bRefused {
		if v, ok := raw[k]; ok && string(v) != "null" && string(v) != "false" && string(v) != "{}" {
			e2b.WriteAPIError(w, http.StatusBadRequest, k+": "+why)
			return
		}
	}
	if n, ok := raw["network"]; ok && string(n) != "null" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(n, &fields); err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, "network: not an object")
			return
		}
		for k := range fields {
			if k != "allowOut" && k != "denyOut" {
				e2b.WriteAPIError(w, http.StatusBadRequest, fmt.Sprintf("network.%s is not supported; network.allowOut narrows the tool's egress (docs/e2b.md)", shorten(k)))
				return
			}
		}
	}
	b, _ := json.Marshal(raw)
	var req e2b.CreateRequest
	if err := json.Unmarshal(b, &req); err != nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, "the body is not a sandbox request: "+err.Error())
		return
	}

	if req.TemplateID == "" {
		e2b.WriteAPIError(w, http.StatusBadRequest, "templateID names the airlock tool to run; it is required")
		return
	}
	t, ok := d.opts.Config.Tools[req.TemplateID]
	if !ok {
		e2b.WriteAPIError(w, http.StatusNotFound, fmt.Sprintf("no template %q: templates are airlock's tools (%s)", shorten(req.TemplateID), strings.Join(d.opts.Config.Order, ", ")))
		return
	}
	if !c.allows(t.Name) {
		d.counts.forbidden.Add(1)
		e2b.WriteAPIError(w, http.StatusForbidden, fmt.Sprintf("%s may not use template %q", c.name, t.Name))
		return
	}
	life, err := e2bTimeout(req.Timeout, e2bDefaultTimeout)
	if err != nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	var env []string
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			e2b.WriteAPIError(w, http.StatusBadRequest, fmt.Sprintf("envVars: %q is not a variable name", shorten(k)))
			return
		}
		env = append(env, k+"="+v)
	}
	narrowed, err := d.e2bNarrow(t.Name, &req)
	if err != nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	// E2B's timeout ends the sandbox however busy it is: the session's
	// lifetime; its idle timeout is the longest allowed.
	s, err := d.newSession(r.Context(), t, clientOf(r), c, maxLife, life, narrowed)
	if err != nil {
		status, _ := statusOf(err)
		e2b.WriteAPIError(w, status, err.Error())
		return
	}
	var tok [24]byte
	rand.Read(tok[:])
	sb := &e2bSandbox{s: s, token: hex.EncodeToString(tok[:]), metadata: req.Metadata, env: env, limits: d.plans[t.Name].Spec.Limits, procs: map[uint32]*e2bProc{}}
	d.e2b.mu.Lock()
	if d.e2b.m == nil {
		d.e2b.m = map[string]*e2bSandbox{}
	}
	// The sandboxes that have ended leave the table: their sessions
	// answer for a while longer, these never again.
	for id, old := range d.e2b.m {
		if old.s.view().State != "active" {
			delete(d.e2b.m, id)
		}
	}
	d.e2b.m[s.id] = sb
	d.e2b.mu.Unlock()
	d.e2bAnswer(w, http.StatusCreated, sb)
}

// e2bNarrow is the policy of a sandbox whose create narrowed the tool's
// egress, or nil when it did not: allow_internet_access false takes every
// destination and the broker's services away; network.allowOut keeps the
// destinations named, each of which must lie within the tool's (a wider
// one is refused, never applied: the operator's config is the ceiling).
func (d *Daemon) e2bNarrow(tool string, req *e2b.CreateRequest) (*attach.Policy, error) {
	noNet := req.AllowInternetAccess != nil && !*req.AllowInternetAccess
	if req.Network == nil && !noNet {
		return nil, nil
	}
	pol := d.plans[tool].Policy
	if noNet {
		pol.Egress, pol.Services = nil, nil
		return &pol, nil
	}
	if len(req.Network.DenyOut) > 0 {
		return nil, errors.New("network.denyOut is not supported: name what the sandbox may reach in network.allowOut, within the tool's egress")
	}
	if len(req.Network.AllowOut) > 256 {
		return nil, errors.New("network.allowOut: at most 256 destinations")
	}
	eg, err := policy.Narrow(pol.Egress, req.Network.AllowOut)
	if err != nil {
		return nil, fmt.Errorf("network.allowOut: %w", err)
	}
	pol.Egress = eg
	return &pol, nil
}

func (d *Daemon) e2bAnswer(w http.ResponseWriter, status int, sb *e2bSandbox) {
	writeJSON(w, status, e2b.Sandbox{SandboxID: sb.s.id, TemplateID: sb.s.tool.Name, ClientID: "airlock", Alias: sb.s.tool.Name,
		EnvdVersion: e2b.EnvdVersion, EnvdAccessToken: sb.token})
}

// e2bFind is the caller's live E2B sandbox id, or nil: another key's, an
// ended one and none at all look the same.
func (d *Daemon) e2bFind(id string, c *caller) *e2bSandbox {
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil || (c != nil && c.name != sb.s.owner) || sb.s.view().State != "active" {
		return nil
	}
	return sb
}

func (d *Daemon) e2bLookup(w http.ResponseWriter, r *http.Request, c *caller) *e2bSandbox {
	sb := d.e2bFind(r.PathValue("id"), c)
	if sb == nil {
		e2b.WriteAPIError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", shorten(r.PathValue("id"))))
	}
	return sb
}

func (sb *e2bSandbox) detail() e2b.Detail {
	v := sb.s.view()
	l := sb.limits
	return e2b.Detail{SandboxID: v.ID, TemplateID: v.Tool, Alias: v.Tool, ClientID: "airlock", StartedAt: v.Created, EndAt: v.Expires,
		EnvdVersion: e2b.EnvdVersion, State: "running", CPUCount: max(1, int(l.CPUMilli+999)/1000), MemoryMB: l.Memory >> 20,
		DiskSizeMB: l.Disk >> 20, Metadata: sb.metadata}
}

func (d *Daemon) e2bGet(w http.ResponseWriter, r *http.Request, c *caller) {
	if sb := d.e2bLookup(w, r, c); sb != nil {
		writeJSON(w, http.StatusOK, sb.detail())
	}
}

func (d *Daemon) e2bList(w http.ResponseWriter, r *http.Request, c *caller) {
	// metadata=k%3Dv&... as the SDK sends it: encoded twice over.
	want := map[string]string{}
	if m := r.URL.Query().Get("metadata"); m != "" {
		q, err := url.ParseQuery(m)
		if err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, "metadata: "+err.Error())
			return
		}
		for k, vs := range q {
			k2, err1 := url.QueryUnescape(k)
			v2, err2 := url.QueryUnescape(vs[0])
			if err1 != nil || err2 != nil {
				e2b.WriteAPIError(w, http.StatusBadRequest, "metadata: not URL-encoded")
				return
			}
			want[k2] = v2
		}
	}
	if st := r.URL.Query().Get("state"); st != "" && !strings.Contains(st, "running") {
		writeJSON(w, http.StatusOK, []e2b.Detail{})
		return
	}
	out := []e2b.Detail{}
	for _, s := range d.sessionsOf(c) {
		sb := d.e2bFind(s.id, c)
		if sb == nil {
			continue
		}
		match := true
		for k, v := range want {
			match = match && sb.metadata[k] == v
		}
		if match {
			out = append(out, sb.detail())
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) e2bKill(w http.ResponseWriter, r *http.Request, c *caller) {
	sb := d.e2bLookup(w, r, c)
	if sb == nil {
		return
	}
	sb.s.end(r.Context(), "deleted")
	if err := d.audit.Append(r.Context()); err != nil {
		d.opts.Logger.Error("audit: a session's end could not be recorded", "session", sb.s.id, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

// setLife ends the sandbox life from now.
func (sb *e2bSandbox) setLife(life time.Duration) {
	sb.s.mu.Lock()
	sb.s.expires = time.Now().Add(life)
	sb.s.mu.Unlock()
}

func (d *Daemon) e2bSetTimeout(w http.ResponseWriter, r *http.Request, c *caller) {
	var req e2b.TimeoutRequest
	if !e2bDecode(w, r, &req) {
		return
	}
	sb := d.e2bLookup(w, r, c)
	if sb == nil {
		return
	}
	if req.Timeout == nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, "timeout (seconds) is required")
		return
	}
	life, err := e2bTimeout(req.Timeout, 0)
	if err != nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	sb.setLife(life)
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) e2bConnect(w http.ResponseWriter, r *http.Request, c *caller) {
	var req e2b.TimeoutRequest
	if !e2bDecode(w, r, &req) {
		return
	}
	sb := d.e2bLookup(w, r, c)
	if sb == nil {
		return
	}
	if req.Timeout != nil {
		life, err := e2bTimeout(req.Timeout, 0)
		if err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
			return
		}
		sb.setLife(life)
	}
	d.e2bAnswer(w, http.StatusOK, sb)
}

// e2bEnvd finds the sandbox of an envd call: its E2b-Sandbox-Id, checked
// against its access token (the API key is not sent on these calls).
func (d *Daemon) e2bEnvd(r *http.Request) (*e2bSandbox, error) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "E2b-Sandbox-Id is required")
	}
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(sb.token)) != 1 {
		d.counts.unauthorized.Add(1)
		// One answer for no sandbox and a wrong token: neither says
		// which sandboxes exist.
		return nil, e2b.Errorf(e2b.CodeNotFound, "sandbox %q not found, or the access token is not its", shorten(id))
	}
	if sb.s.view().State != "active" {
		return nil, e2b.Errorf(e2b.CodeNotFound, "sandbox %q has ended (%s)", shorten(id), sb.s.view().EndReason)
	}
	return sb, nil
}

// e2bUnary serves a unary Connect call of a sandbox.
func (d *Daemon) e2bUnary(h func(r *http.Request, sb *e2bSandbox, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := d.e2bEnvd(r)
		if err != nil {
			e2b.WriteUnaryError(w, err)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, e2b.MaxMessage+1))
		if err != nil || len(body) > e2b.MaxMessage {
			e2b.WriteUnaryError(w, e2b.Errorf(e2b.CodeResourceExhaust, "request over %d KiB", e2b.MaxMessage>>10))
			return
		}
		v, err := h(r, sb, body)
		if err != nil {
			e2b.WriteUnaryError(w, err)
			return
		}
		e2b.WriteUnary(w, v)
	}
}

func (d *Daemon) e2bProcList(r *http.Request, sb *e2bSandbox, _ []byte) (any, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	out := []e2b.ProcessInfo{}
	for _, p := range sb.procs {
		out = append(out, e2b.ProcessInfo{Config: p.config, PID: p.pid})
	}
	return map[string]any{"processes": out}, nil
}

func (d *Daemon) e2bSignal(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req e2b.SignalRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "request: %v", err)
	}
	sig, ok := e2b.Signals[req.Signal]
	if !ok {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "signal %q: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", shorten(req.Signal))
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	select {
	case p.signal <- unix.Signal(sig):
	default: // one is on its way already
	}
	return struct{}{}, nil
}

// procOf finds the process a request selects.
func (sb *e2bSandbox) procOf(sel e2b.Selector) (*e2bProc, error) {
	if sel.PID == nil {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "process.pid is required (tags are not supported)")
	}
	sb.mu.Lock()
	p := sb.procs[*sel.PID]
	sb.mu.Unlock()
	if p == nil {
		return nil, e2b.Errorf(e2b.CodeNotFound, "process %d not found", *sel.PID)
	}
	return p, nil
}

func (d *Daemon) e2bInput(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req struct {
		Process e2b.Selector `json:"process"`
		Input   struct {
			Stdin []byte `json:"stdin"`
			PTY   []byte `json:"pty"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "request: %v", err)
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Input.PTY != nil:
		return nil, e2b.Errorf(e2b.CodeUnimplemented, "pty input is not supported yet")
	case p.stdin == nil:
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "process %d was not started with stdin", p.pid)
	}
	// Blocks while the command does not read, at most until it ends.
	if _, err := p.stdin.Write(req.Input.Stdin); err != nil {
		return nil, e2b.Errorf(e2b.CodeNotFound, "process %d: its input is closed", p.pid)
	}
	return struct{}{}, nil
}

func (d *Daemon) e2bCloseStdin(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req struct {
		Process e2b.Selector `json:"process"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "request: %v", err)
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		return nil, err
	}
	if p.stdin == nil {
		return nil, e2b.Errorf(e2b.CodeInvalidArgument, "process %d was not started with stdin", p.pid)
	}
	p.stdin.Close()
	return struct{}{}, nil
}

// keepaliveEvery bounds the silence of a process's stream: the SDK's
// HTTP client gives up on a response silent for 300 s.
const keepaliveEvery = 50 * time.Second

// e2bStart is process.Process/Start: the command runs in the session's
// sandbox; its stream says it started, carries its output, and ends
// with its end. The client going away does not end the command; the
// Connect-Timeout-Ms header is its lifetime (a SIGKILL when it runs out).
func (d *Daemon) e2bStart(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, rc: http.NewResponseController(w)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var req e2b.StartRequest
	if err := e2b.ReadRequest(r.Body, &req); err != nil {
		st.end(err)
		return
	}
	switch {
	case req.Process == nil || req.Process.Cmd == "":
		st.end(e2b.Errorf(e2b.CodeInvalidArgument, "process.cmd is required"))
		return
	case req.PTY != nil:
		st.end(e2b.Errorf(e2b.CodeUnimplemented, "pty is not supported yet through the E2B API; use airlock session exec -t"))
		return
	}
	env := append([]string(nil), sb.env...)
	for k, v := range req.Process.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			st.end(e2b.Errorf(e2b.CodeInvalidArgument, "envs: %q is not a variable name", shorten(k)))
			return
		}
		env = append(env, k+"="+v)
	}
	dir := ""
	if req.Process.Cwd != nil {
		dir = *req.Process.Cwd
		if !path.IsAbs(dir) {
			st.end(e2b.Errorf(e2b.CodeInvalidArgument, "cwd %q is not an absolute path", shorten(dir)))
			return
		}
	}
	var life time.Duration
	if v := r.Header.Get("Connect-Timeout-Ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 || len(v) > 10 {
			st.end(e2b.Errorf(e2b.CodeInvalidArgument, "Connect-Timeout-Ms %q is not a number of milliseconds", shorten(v)))
			return
		}
		life = time.Duration(ms) * time.Millisecond
	}
	if !sb.s.enter() {
		st.end(e2b.Errorf(e2b.CodeNotFound, "sandbox %q has ended", sb.s.id))
		return
	}
	defer sb.s.leave()
	p := &e2bProc{config: *req.Process, signal: make(chan unix.Signal, 1), subs: map[*e2bStream]struct{}{}, done: make(chan struct{})}
	sb.mu.Lock()
	sb.nextPID++
	p.pid = sb.nextPID
	sb.procs[p.pid] = p
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		delete(sb.procs, p.pid)
		sb.mu.Unlock()
	}()
	if life > 0 {
		t := time.AfterFunc(life, func() {
			select {
			case p.signal <- unix.SIGKILL:
			default:
			}
		})
		defer t.Stop()
	}
	x := sandbox.ExecRequest{Argv: append([]string{req.Process.Cmd}, req.Process.Args...), Env: env, Dir: workdir(dir, sb.s.tool), Signal: p.signal}
	if req.Stdin != nil && *req.Stdin {
		pr, pw := io.Pipe()
		x.Stdin, p.stdin = pr, pw
		// Once the command has ended, input sent to it fails.
		defer pr.Close()
	}
	x.OnEvent = func(ev result.Event) {
		switch ev.Type {
		case result.EventStdout:
			p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{Stdout: ev.Data}})
		case result.EventStderr:
			p.send(e2b.ProcessEvent{Data: &e2b.DataEvent{Stderr: ev.Data}})
		}
	}
	st.event(e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}})
	detach := p.attach(st)
	stop := st.keepalive(keepaliveEvery)
	// Not the request's context: the command outlives its client.
	res, err := d.exec(context.WithoutCancel(r.Context()), sb.s, clientOf(r), x)
	stop()
	detach()
	if err != nil {
		status, _ := statusOf(err)
		code := e2b.CodeInternal
		if status == http.StatusServiceUnavailable {
			code = e2b.CodeUnavailable
		}
		p.endErr = e2b.Errorf(code, "%v", err)
	} else {
		p.end = endEvent(res)
	}
	close(p.done)
	p.finish(st)
}

// e2bProcConnect is process.Process/Connect: a stream of a running command's
// output from now on (not what it wrote before), and its end.
func (d *Daemon) e2bProcConnect(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, rc: http.NewResponseController(w)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var req struct {
		Process e2b.Selector `json:"process"`
	}
	if err := e2b.ReadRequest(r.Body, &req); err != nil {
		st.end(err)
		return
	}
	p, err := sb.procOf(req.Process)
	if err != nil {
		st.end(err)
		return
	}
	st.event(e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}})
	detach := p.attach(st)
	stop := st.keepalive(keepaliveEvery)
	select {
	case <-p.done:
	case <-r.Context().Done():
	}
	stop()
	detach()
	select {
	case <-p.done:
		p.finish(st)
	default: // the client went away first
	}
}

// endEvent is a result as envd reports a process's end. A breach, which
// also ends the sandbox, is an error that names the ceiling.
func endEvent(r *result.Result) *e2b.EndEvent {
	switch r.Outcome {
	case result.Exited:
		e := &e2b.EndEvent{ExitCode: int32(r.ExitCode), Exited: true, Status: fmt.Sprintf("exit status %d", r.ExitCode)}
		if r.ExitCode != 0 {
			e.Error = e.Status
		}
		return e
	case result.Signaled:
		name := unix.SignalName(unix.Signal(r.Signal))
		return &e2b.EndEvent{ExitCode: -1, Status: "signal: " + name, Error: "signal: " + name}
	case result.LimitExceeded:
		msg := "the sandbox was destroyed: limit exceeded"
		if r.Limit != nil {
			msg = fmt.Sprintf("the sandbox was destroyed: limit exceeded: %s (ceiling %d %s, observed %d)", r.Limit.Name, r.Limit.Ceiling, r.Limit.Unit, r.Limit.Observed)
		}
		return &e2b.EndEvent{ExitCode: -1, Status: msg, Error: msg}
	default:
		return &e2b.EndEvent{ExitCode: -1, Status: "error: " + r.Error, Error: r.Error}
	}
}

// e2bStream writes a server-streaming Connect answer: 200 with
// application/connect+json once, enveloped events, an end of stream.
// Writes after the client went away are dropped.
type e2bStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex // guards started and gone, and orders the writes
	started bool
	gone    bool // the client went away, or the stream has ended
}

func (s *e2bStream) write(flags byte, v any, flush bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.w.Header().Set("Content-Type", "application/connect+json")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if s.gone {
		return
	}
	if _, err := s.w.Write(e2b.AppendEnvelope(nil, flags, b)); err != nil {
		s.gone = true
		return
	}
	if flush && s.rc.Flush() != nil {
		s.gone = true
	}
	if flags&e2b.FlagEndStream != 0 {
		// The handler returns next: nothing touches w after this.
		s.gone = true
	}
}

func (s *e2bStream) event(ev e2b.ProcessEvent) { s.write(0, e2b.StreamEvent{Event: ev}, true) }

// end ends the stream, with err as the call's error if it is not nil; a
// last event, if given, goes out in the same write.
func (s *e2bStream) end(err error, last ...e2b.ProcessEvent) {
	for _, ev := range last {
		s.write(0, e2b.StreamEvent{Event: ev}, false)
	}
	var es e2b.EndStream
	if err != nil {
		var re *e2b.RPCError
		if !errors.As(err, &re) {
			re = e2b.Errorf(e2b.CodeInternal, "%v", err)
		}
		es.Error = re
	}
	s.write(e2b.FlagEndStream, es, true)
}

// keepalive sends a keepalive event after every interval of silence
// until stop.
func (s *e2bStream) keepalive(every time.Duration) (stop func()) {
	t := time.NewTicker(every)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				s.event(e2b.ProcessEvent{Keepalive: &struct{}{}})
			case <-done:
				return
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}

// e2bPath is an E2B file path as a path of the workspace: absolute ones
// under it, relative ones from it. Nothing else of the sandbox's is
// reachable through the files API.
func e2bPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is required")
	}
	if path.IsAbs(p) {
		rel, ok := strings.CutPrefix(path.Clean(p), sandbox.HomeDir+"/")
		if !ok {
			return "", fmt.Errorf("path %q is outside %s: the files API reaches the workspace only", shorten(p), sandbox.HomeDir)
		}
		p = rel
	}
	if err := checkRel(p); err != nil {
		return "", err
	}
	return p, nil
}

// checkRel refuses a relative path with empty, "." or ".." elements.
func checkRel(p string) error {
	for _, e := range strings.Split(p, "/") {
		if e == "" || e == "." || e == ".." || strings.ContainsRune(e, 0) {
			return fmt.Errorf("path %q: empty, \".\" and \"..\" elements are refused", shorten(p))
		}
	}
	return nil
}

// e2bFileSandbox finds the sandbox of a files call and enters it: by its
// E2b-Sandbox-Id and access token, or, for a signed download or upload
// URL (which carries neither), by the signature, made with one sandbox's
// token over the path, the operation (op), the user and the expiry.
func (d *Daemon) e2bFileSandbox(w http.ResponseWriter, r *http.Request, op string) *e2bSandbox {
	var sb *e2bSandbox
	var err error
	if r.Header.Get("E2b-Sandbox-Id") == "" && r.URL.Query().Has("signature") {
		sb, err = d.e2bSigned(r, op)
	} else {
		sb, err = d.e2bEnvd(r)
	}
	if err != nil {
		status := http.StatusNotFound
		var re *e2b.RPCError
		if errors.As(err, &re) && re.Code == e2b.CodeInvalidArgument {
			status = http.StatusBadRequest
		}
		e2b.WriteAPIError(w, status, err.Error())
		return nil
	}
	if !sb.s.enter() {
		e2b.WriteAPIError(w, http.StatusNotFound, "the sandbox has ended")
		return nil
	}
	return sb
}

// e2bSigned finds the sandbox whose token signed the request's URL.
func (d *Daemon) e2bSigned(r *http.Request, op string) (*e2bSandbox, error) {
	q := r.URL.Query()
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		var err error
		if exp, err = strconv.ParseInt(v, 10, 64); err != nil || exp <= 0 {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "signature_expiration %q is not a time in Unix seconds", shorten(v))
		}
		if time.Now().Unix() > exp {
			return nil, e2b.Errorf(e2b.CodeNotFound, "the signed URL has expired")
		}
	}
	sig := []byte(q.Get("signature"))
	d.e2b.mu.Lock()
	cands := make([]*e2bSandbox, 0, len(d.e2b.m))
	for _, sb := range d.e2b.m {
		cands = append(cands, sb)
	}
	d.e2b.mu.Unlock()
	var found *e2bSandbox
	for _, sb := range cands {
		want := e2b.Signature(q.Get("path"), op, q.Get("username"), sb.token, exp)
		if subtle.ConstantTimeCompare([]byte(want), sig) == 1 {
			found = sb
		}
	}
	if found == nil || found.s.view().State != "active" {
		d.counts.unauthorized.Add(1)
		return nil, e2b.Errorf(e2b.CodeNotFound, "no sandbox signed this URL for this path and operation")
	}
	return found, nil
}

// e2bFileError answers a files call's failure as envd would.
func e2bFileError(w http.ResponseWriter, err error) {
	status, _ := statusOf(fileErr(err))
	e2b.WriteAPIError(w, status, fileErr(err).Error())
}

func (d *Daemon) e2bReadFile(w http.ResponseWriter, r *http.Request) {
	sb := d.e2bFileSandbox(w, r, "read")
	if sb == nil {
		return
	}
	defer sb.s.leave()
	rel, err := e2bPath(r.URL.Query().Get("path"))
	if err != nil {
		e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, size, err := sb.s.openFile(rel)
	if err != nil {
		e2bFileError(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, io.LimitReader(f, size))
}

func (d *Daemon) e2bWriteFile(w http.ResponseWriter, r *http.Request) {
	sb := d.e2bFileSandbox(w, r, "write")
	if sb == nil {
		return
	}
	defer sb.s.leave()
	r.Body = http.MaxBytesReader(w, r.Body, maxFile+1<<20)
	put := func(p string, body io.Reader) (e2b.WrittenFile, bool) {
		rel, err := e2bPath(p)
		if err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, err.Error())
			return e2b.WrittenFile{}, false
		}
		if _, err := sb.s.writeFile(rel, body); err != nil {
			e2bFileError(w, err)
			return e2b.WrittenFile{}, false
		}
		return e2b.WrittenFile{Name: path.Base(rel), Type: "file", Path: sandbox.HomeDir + "/" + rel}, true
	}
	var out []e2b.WrittenFile
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		// Decompressed, the file is still bounded by writeFile's cap.
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, "the gzip body: "+err.Error())
			return
		}
		defer zr.Close()
		r.Body = zr
	default:
		e2b.WriteAPIError(w, http.StatusBadRequest, fmt.Sprintf("Content-Encoding %q: only gzip is supported", shorten(enc)))
		return
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				e2b.WriteAPIError(w, http.StatusBadRequest, "the multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				continue
			}
			// A signed URL's path is the one signed; only a request
			// with the sandbox's token may name others in its parts.
			p := r.URL.Query().Get("path")
			if p == "" && !r.URL.Query().Has("signature") {
				p = part.FileName()
			}
			wf, ok := put(p, part)
			if !ok {
				return
			}
			out = append(out, wf)
		}
	default:
		wf, ok := put(r.URL.Query().Get("path"), r.Body)
		if !ok {
			return
		}
		out = append(out, wf)
	}
	if len(out) == 0 {
		e2b.WriteAPIError(w, http.StatusBadRequest, `no file in the body (a multipart field "file", or the bytes themselves)`)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// inWorkspace runs fn on the session's workspace as the sandbox's user
// (see writeFile). The caller has entered the session.
func (s *session) inWorkspace(fn func(ws *os.File, uid int) error) error {
	ws, err := s.sb.OpenWorkspace()
	if err != nil {
		return errGone
	}
	defer ws.Close()
	id := s.sb.UserHostID()
	return inroot.AsUser(id, id, func() error { return fn(ws, id) })
}

// e2bFSPath is e2bPath for the filesystem calls, where the workspace
// itself ("" below it) may be named too.
func e2bFSPath(p string) (string, error) {
	if c := path.Clean(p); c == sandbox.HomeDir || p == "." {
		return "", nil
	}
	return e2bPath(p)
}

// e2bFSError is a file operation's failure as envd's Connect code.
func e2bFSError(p string, err error) error {
	switch {
	case errors.Is(err, inroot.ErrNotFound):
		return e2b.Errorf(e2b.CodeNotFound, "%s: no such file or directory", shorten(p))
	case errors.Is(err, inroot.ErrExists):
		return e2b.Errorf(e2b.CodeAlreadyExists, "%s: %v", shorten(p), err)
	case errors.Is(err, inroot.ErrPath):
		return e2b.Errorf(e2b.CodeInvalidArgument, "%s: %v", shorten(p), err)
	case errors.Is(err, inroot.ErrTooMany), errors.Is(err, inroot.ErrNoSpace):
		return e2b.Errorf(e2b.CodeResourceExhaust, "%s: %v", shorten(p), err)
	case errors.Is(err, errGone):
		return e2b.Errorf(e2b.CodeNotFound, "the sandbox has ended")
	}
	return e2b.Errorf(e2b.CodeInternal, "%s: the file operation failed", shorten(p))
}

// entryInfo is an inroot.Entry as envd describes a file.
func (sb *e2bSandbox) entryInfo(e inroot.Entry) e2b.EntryInfo {
	typ := "FILE_TYPE_UNSPECIFIED"
	switch {
	case e.IsRegular():
		typ = "FILE_TYPE_FILE"
	case e.IsDir():
		typ = "FILE_TYPE_DIRECTORY"
	case e.IsSymlink():
		typ = "FILE_TYPE_SYMLINK"
	}
	name := func(id uint32) string {
		base := sb.s.sb.HostIDBase()
		switch {
		case id == uint32(sb.s.sb.UserHostID()):
			return "sandbox"
		case id == base:
			return "root"
		case id > base && id-base < 65536:
			return strconv.Itoa(int(id - base))
		}
		return "nobody"
	}
	p := sandbox.HomeDir
	if e.Rel != "" {
		p += "/" + e.Rel
	}
	info := e2b.EntryInfo{Name: path.Base(p), Type: typ, Path: p, Size: strconv.FormatInt(e.Size, 10),
		Mode: e.Mode & 0o7777, Permissions: fileModeString(e.Mode), Owner: name(e.UID), Group: name(e.GID),
		ModifiedTime: e.ModTime.UTC().Format(time.RFC3339Nano)}
	if e.IsSymlink() {
		t := e.Target
		info.SymlinkTarget = &t
	}
	return info
}

// fileModeString is ls's rendering of st_mode ("-rw-r--r--").
func fileModeString(m uint32) string {
	b := []byte("?rwxrwxrwx")
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		b[0] = '-'
	case unix.S_IFDIR:
		b[0] = 'd'
	case unix.S_IFLNK:
		b[0] = 'l'
	}
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	return string(b)
}

// e2bFS serves a filesystem call: the request's JSON into req, fn's
// answer, inside the session's workspace as its user.
func e2bFS[T any](d *Daemon, fn func(sb *e2bSandbox, req *T) (any, error)) http.HandlerFunc {
	return d.e2bUnary(func(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
		var req T
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "request: %v", err)
		}
		if !sb.s.enter() {
			return nil, e2b.Errorf(e2b.CodeNotFound, "the sandbox has ended")
		}
		defer sb.s.leave()
		return fn(sb, &req)
	})
}

func (d *Daemon) e2bFSRoutes(mux *http.ServeMux) {
	type pathReq struct {
		Path  string `json:"path"`
		Depth *int   `json:"depth,omitempty"`
	}
	mux.HandleFunc("POST /filesystem.Filesystem/Stat", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		rel, err := e2bFSPath(req.Path)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "%v", err)
		}
		var e inroot.Entry
		err = sb.s.inWorkspace(func(ws *os.File, _ int) (err error) { e, err = inroot.Stat(ws, rel); return err })
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return map[string]any{"entry": sb.entryInfo(e)}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/ListDir", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		rel, err := e2bFSPath(req.Path)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "%v", err)
		}
		depth := 1
		if req.Depth != nil {
			depth = *req.Depth
		}
		if depth < 1 || depth > 64 {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "depth %d: want 1 to 64", depth)
		}
		var es []inroot.Entry
		err = sb.s.inWorkspace(func(ws *os.File, _ int) (err error) { es, err = inroot.ReadDir(ws, rel, depth); return err })
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		out := make([]e2b.EntryInfo, 0, len(es))
		for _, e := range es {
			out = append(out, sb.entryInfo(e))
		}
		return map[string]any{"entries": out}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/MakeDir", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		rel, err := e2bPath(req.Path)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "%v", err)
		}
		var e inroot.Entry
		err = sb.s.inWorkspace(func(ws *os.File, uid int) error {
			made, err := inroot.Mkdir(ws, rel, uid, uid)
			if err == nil && !made {
				return fmt.Errorf("%w: a directory", inroot.ErrExists)
			}
			if err == nil {
				e, err = inroot.Stat(ws, rel)
			}
			return err
		})
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return map[string]any{"entry": sb.entryInfo(e)}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/Remove", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		rel, err := e2bPath(req.Path)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "%v", err)
		}
		if err := sb.s.inWorkspace(func(ws *os.File, _ int) error { return inroot.Remove(ws, rel) }); err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return struct{}{}, nil
	}))
	type moveReq struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	mux.HandleFunc("POST /filesystem.Filesystem/Move", e2bFS(d, func(sb *e2bSandbox, req *moveReq) (any, error) {
		from, err := e2bPath(req.Source)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "source: %v", err)
		}
		to, err := e2bPath(req.Destination)
		if err != nil {
			return nil, e2b.Errorf(e2b.CodeInvalidArgument, "destination: %v", err)
		}
		var e inroot.Entry
		err = sb.s.inWorkspace(func(ws *os.File, _ int) error {
			if err := inroot.Rename(ws, from, to); err != nil {
				return err
			}
			var err error
			e, err = inroot.Stat(ws, to)
			return err
		})
		if err != nil {
			return nil, e2bFSError(req.Source, err)
		}
		return map[string]any{"entry": sb.entryInfo(e)}, nil
	}))
}
