// Package client is the Go client of airlock's HTTP API: on a daemon's
// unix socket, or on TCP (a daemon's listener, a cluster's front, either
// behind a TLS-terminating proxy) with a token. The CLI and the tests use
// it.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/result"
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	http *http.Client
	base string
	// where names the daemon in errors: its socket or TCP address.
	where string
	// remote: the daemon is reached over TCP, not a socket of this host.
	remote bool
}

// New returns a client of the daemon listening on the unix socket path.
func New(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 8,
	}
	return &Client{http: &http.Client{Transport: tr, CheckRedirect: noRedirects}, base: "http://airlock", where: socket}
}

// noRedirects makes a redirect the answer: the API never redirects a
// request it has served, and a request with a body (a file PUT) cannot
// be sent again anyway, so a redirect is reported as an error, not
// followed or taken for success.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// NewTCP returns a client of a daemon's TCP listener at addr
// ("host:port"), sending token as its bearer token.
func NewTCP(addr, token string) *Client {
	c, err := NewRemote("http://"+addr, token)
	if err != nil {
		// Not a host:port; every request says so.
		return &Client{http: &http.Client{Transport: failing{err}}, base: "http://airlock", where: addr}
	}
	return c
}

// NewRemote returns a client of the API at target: "http://HOST:PORT" or
// "https://HOST[:PORT]" (a TLS-terminating proxy), optionally with a path
// the API is served under, or a bare "HOST:PORT" (http). Every request
// carries token as its bearer token. It speaks HTTP/1.1 only, which
// terminals need (their connection is switched with an HTTP/1.1 upgrade).
func NewRemote(target, token string) (*Client, error) {
	base, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	tr.MaxIdleConnsPerHost = 8
	return &Client{http: &http.Client{Transport: &bearer{token: token, next: tr}, CheckRedirect: noRedirects}, base: base.String(), where: base.Redacted(), remote: true}, nil
}

// ParseTarget checks a remote API's address as NewRemote takes it and
// returns it as a URL without a trailing slash.
func ParseTarget(target string) (*url.URL, error) {
	if target == "" {
		return nil, errors.New("no address: want http://HOST:PORT or https://HOST[:PORT]")
	}
	raw := target
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q: want http://HOST:PORT or https://HOST[:PORT]: %v", target, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be http or https (a unix socket is --socket)", target)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q: no host", target)
	case u.User != nil:
		return nil, fmt.Errorf("%q: no user or password in the address; the token is given apart from it", target)
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("%q: no query or fragment in the address", target)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: bad port %q", target, p)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// failing is a transport whose every request fails with err.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// Endpoint returns an HTTP client and the URL of path on the daemon, for
// an endpoint this package has no method for (the MCP endpoint, /mcp):
// requests made with it carry the client's token, and on a socket go to
// the socket.
func (c *Client) Endpoint(path string) (*http.Client, string) {
	return c.http, c.base + path
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Error is an error answer of the API.
type Error struct {
	// Status is the HTTP status; Code and Message come from the body.
	Status        int
	Code, Message string
	// RetryAfter is the daemon's Retry-After (a call refused for want of
	// capacity: 503 capacity, 429 too_many_requests), or 0.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("airlock daemon: %s (%d %s)", e.Message, e.Status, e.Code)
}

func (c *Client) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	return resp, nil
}

// ErrNoDaemon is the error of a request no daemon answered: nothing
// listens on the socket or address.
var ErrNoDaemon = errors.New("no airlock daemon answers")

// roundTrip sends req; a daemon that is not there is said in a sentence
// (matching ErrNoDaemon), not as a raw dial error.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		if c.remote {
			return nil, fmt.Errorf("%w at %s (is airlock serve, or airlock front, running there and reachable from here? %v)", ErrNoDaemon, c.where, op.Err)
		}
		return nil, fmt.Errorf("%w on %s (is `airlock serve` running? %v)", ErrNoDaemon, c.where, op.Err)
	}
	return resp, err
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// Run runs one command of a tool in a fresh sandbox and returns its
// result, with the output captured.
func (c *Client) Run(ctx context.Context, req api.RunRequest) (*result.Result, error) {
	return c.postResult(ctx, "/v1/runs", req)
}

// postResult posts body to path and decodes the result answered.
func (c *Client) postResult(ctx context.Context, path string, body any) (*result.Result, error) {
	resp, err := c.do(ctx, http.MethodPost, path, body, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r result.Result
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("airlock daemon: bad result: %w", err)
	}
	return &r, nil
}

// RunStream runs one command and calls fn for every event as it arrives
// (output chunks, samples, egress and broker decisions), then returns the
// final result.
func (c *Client) RunStream(ctx context.Context, req api.RunRequest, fn func(result.Event)) (*result.Result, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/runs", req, api.NDJSON)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readEvents(resp.Body, fn)
}

// readEvents reads an NDJSON event stream up to its result event.
func readEvents(r io.Reader, fn func(result.Event)) (*result.Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev result.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("airlock daemon: bad event: %w", err)
		}
		if ev.Type == result.EventResult && ev.Result != nil {
			return ev.Result, nil
		}
		if fn != nil {
			fn(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("airlock daemon: the stream ended without a result")
}

// Tools lists the daemon's tools.
func (c *Client) Tools(ctx context.Context) ([]api.Tool, error) {
	var t []api.Tool
	return t, c.getJSON(ctx, "/v1/tools", &t)
}

// Pools returns every tool's pool counters.
func (c *Client) Pools(ctx context.Context) ([]api.PoolStats, error) {
	var p []api.PoolStats
	return p, c.getJSON(ctx, "/v1/pools", &p)
}

// PS lists what runs now: runs and MCP servers in flight, and active
// sessions, as the caller may see them.
func (c *Client) PS(ctx context.Context) (*api.Activity, error) {
	var a api.Activity
	if err := c.getJSON(ctx, "/v1/ps", &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Reload has the daemon read its config file again and apply it (the
// local socket's only): tools added, changed, removed and kept, and the
// settings that take a restart.
func (c *Client) Reload(ctx context.Context) (*api.ReloadReport, error) {
	return c.reload(ctx, api.ReloadRequest{})
}

// ReloadImages has the daemon resolve its tools' image names again,
// its config kept: after an image is stored under a name.
func (c *Client) ReloadImages(ctx context.Context) (*api.ReloadReport, error) {
	return c.reload(ctx, api.ReloadRequest{ImagesOnly: true})
}

func (c *Client) reload(ctx context.Context, req api.ReloadRequest) (*api.ReloadReport, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/reload", req, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r api.ReloadReport
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("airlock daemon: bad reload report: %w", err)
	}
	return &r, nil
}

// KillRun ends a run or MCP server in flight (an id from PS) and
// destroys its sandbox; the kill is in the audit log.
func (c *Client) KillRun(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/v1/runs/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	return c.send(req)
}

// AuditQuery selects audit events; empty fields do not filter.
type AuditQuery struct {
	// After returns only events with a larger id (the paging cursor).
	After int64
	// Cursor, when set, is sent instead of After: a page's Next as
	// AuditFeed returns it (a cluster front's cursor is text).
	Cursor string
	// Since and Until bound the event time: RFC 3339, or a duration
	// before now ("15m").
	Since, Until string
	// Kind matches the kind and the kinds below it ("sandbox" matches
	// "sandbox.created").
	Kind, Tool, Sandbox, Session, Run, Client, Decision string
	// Limit bounds the page (1 to 1000; 0 is the daemon's default, 100).
	Limit int
	// Tail asks for the newest events (still oldest first).
	Tail bool
	// Wait holds the request, up to a minute, until an event newer than
	// After exists.
	Wait time.Duration
}

// Values are q as GET /v1/audit's query parameters.
func (q AuditQuery) Values() url.Values { return q.values() }

func (q AuditQuery) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Cursor != "" {
		v.Set("after", q.Cursor)
	} else if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	set("since", q.Since)
	set("until", q.Until)
	set("kind", q.Kind)
	set("tool", q.Tool)
	set("sandbox", q.Sandbox)
	set("session", q.Session)
	set("run", q.Run)
	set("client", q.Client)
	set("decision", q.Decision)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Tail {
		v.Set("tail", "true")
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	return v
}

// Audit reads one page of a daemon's audit log.
func (c *Client) Audit(ctx context.Context, q AuditQuery) (*api.AuditPage, error) {
	var p api.AuditPage
	return &p, c.getJSON(ctx, auditPath(q), &p)
}

func auditPath(q AuditQuery) string {
	path := "/v1/audit"
	if v := q.values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	return path
}

// AuditFeed reads one page of the audit log of a daemon or of a cluster's
// front alike: a front's events carry their node, and the cursor is
// text either way (a daemon's id, or a front's cursor), for the next
// query's Cursor.
func (c *Client) AuditFeed(ctx context.Context, q AuditQuery) (*api.ClusterAuditPage, error) {
	var raw struct {
		Events    []api.AuditEvent `json:"events"`
		Next      json.RawMessage  `json:"next"`
		Unreached []string         `json:"unreached"`
	}
	if err := c.getJSON(ctx, auditPath(q), &raw); err != nil {
		return nil, err
	}
	p := &api.ClusterAuditPage{Events: raw.Events, Unreached: raw.Unreached}
	var id int64
	switch {
	case len(raw.Next) == 0 || string(raw.Next) == "null":
	case json.Unmarshal(raw.Next, &id) == nil:
		if id > 0 {
			p.Next = strconv.FormatInt(id, 10)
		}
	case json.Unmarshal(raw.Next, &p.Next) == nil:
	default:
		return nil, fmt.Errorf("airlock daemon: bad audit cursor %.40s", raw.Next)
	}
	return p, nil
}

// Sessions lists the sessions the caller may see, open and recently
// ended.
func (c *Client) Sessions(ctx context.Context) ([]api.Session, error) {
	var s []api.Session
	return s, c.getJSON(ctx, "/v1/sessions", &s)
}

// Health returns nil when the daemon answers.
func (c *Client) Health(ctx context.Context) error {
	var v map[string]string
	return c.getJSON(ctx, "/healthz", &v)
}

// CreateSession opens a session of a tool: one dedicated sandbox for its
// lifetime.
func (c *Client) CreateSession(ctx context.Context, req api.SessionRequest) (*api.Session, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/sessions", req, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s api.Session
	return &s, json.NewDecoder(resp.Body).Decode(&s)
}

// Session returns a session's state.
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	var s api.Session
	return &s, c.getJSON(ctx, "/v1/sessions/"+url.PathEscape(id), &s)
}

// Exec runs a command in a session's sandbox.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (*result.Result, error) {
	return c.postResult(ctx, "/v1/sessions/"+url.PathEscape(id)+"/exec", req)
}

// PutFile writes data to path (relative to /workspace) in a session.
func (c *Client) PutFile(ctx context.Context, id, path string, data io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/v1/sessions/"+url.PathEscape(id)+"/files/"+escapePath(path), data)
	if err != nil {
		return err
	}
	return c.send(req)
}

// GetFile reads path (relative to /workspace) from a session.
func (c *Client) GetFile(ctx context.Context, id, path string) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/files/"+escapePath(path), nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// PauseSession pauses a session: its processes frozen, its clocks
// stopped, until ResumeSession.
func (c *Client) PauseSession(ctx context.Context, id string) (*api.Session, error) {
	return c.sessionPost(ctx, "/v1/sessions/"+url.PathEscape(id)+"/pause", nil)
}

// ResumeSession resumes a paused session; req may be nil.
func (c *Client) ResumeSession(ctx context.Context, id string, req *api.ResumeRequest) (*api.Session, error) {
	var body any
	if req != nil {
		body = req
	}
	return c.sessionPost(ctx, "/v1/sessions/"+url.PathEscape(id)+"/resume", body)
}

// sessionPost posts body to path and decodes the session it answers.
func (c *Client) sessionPost(ctx context.Context, path string, body any) (*api.Session, error) {
	resp, err := c.do(ctx, http.MethodPost, path, body, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s api.Session
	return &s, json.NewDecoder(resp.Body).Decode(&s)
}

// Snapshot captures a session's files (its workspace and /tmp) as a
// snapshot, named name if it is not empty.
func (c *Client) Snapshot(ctx context.Context, id, name string) (*api.Snapshot, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/snapshots", api.SnapshotRequest{Name: name}, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m api.Snapshot
	return &m, json.NewDecoder(resp.Body).Decode(&m)
}

// Snapshots lists the snapshots the caller may see, oldest first.
func (c *Client) Snapshots(ctx context.Context) ([]api.Snapshot, error) {
	var out []api.Snapshot
	return out, c.getJSON(ctx, "/v1/snapshots", &out)
}

// GetSnapshot describes a snapshot, by id or name.
func (c *Client) GetSnapshot(ctx context.Context, idOrName string) (*api.Snapshot, error) {
	var m api.Snapshot
	return &m, c.getJSON(ctx, "/v1/snapshots/"+url.PathEscape(idOrName), &m)
}

// DeleteSnapshot deletes a snapshot, by id or name.
func (c *Client) DeleteSnapshot(ctx context.Context, idOrName string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/v1/snapshots/"+url.PathEscape(idOrName), nil)
	if err != nil {
		return err
	}
	return c.send(req)
}

// Fork makes req.Count fresh sessions from a session's files as they
// are now; each entry is a session or why it was not made.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) ([]api.Forked, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/fork", req, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []api.Forked
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// CreateVolume makes a volume of the caller's.
func (c *Client) CreateVolume(ctx context.Context, req api.VolumeRequest) (*api.Volume, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/volumes", req, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v api.Volume
	return &v, json.NewDecoder(resp.Body).Decode(&v)
}

// Volumes lists the volumes the caller may see, oldest first.
func (c *Client) Volumes(ctx context.Context) ([]api.Volume, error) {
	var out []api.Volume
	return out, c.getJSON(ctx, "/v1/volumes", &out)
}

// DeleteVolume deletes a volume (by id or name) and everything in it.
func (c *Client) DeleteVolume(ctx context.Context, idOrName string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/v1/volumes/"+url.PathEscape(idOrName), nil)
	if err != nil {
		return err
	}
	return c.send(req)
}

// DeleteSession ends a session and destroys its sandbox.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/v1/sessions/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	return c.send(req)
}

// send does a request whose answer has no body of interest.
func (c *Client) send(req *http.Request) error {
	resp, err := c.roundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return apiError(resp)
	}
	return nil
}

// escapePath escapes each element of a slash-separated path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// apiError reads an error answer.
func apiError(resp *http.Response) *Error {
	var body api.Error
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil || body.Message == "" {
		body.Message = resp.Status
	}
	e := &Error{Status: resp.StatusCode, Code: body.Code, Message: body.Message}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	return e
}

// TTY is the user's side of a run or an exec with a terminal (see
// api.TTYUpgrade).
type TTY struct {
	// Size is the terminal's size at the start.
	Size api.TTYSize
	// Stdin is what is typed; its end is sent as the end of input (the
	// command reads a Ctrl-D). Nil types nothing. A read that is still
	// blocked when the command ends is left to return on its own.
	Stdin io.Reader
	// Output gets what the terminal shows.
	Output io.Writer
	// Resize carries the window's size changes.
	Resize <-chan api.TTYSize
	// OnEvent, if set, gets the other events (samples, egress and broker
	// decisions).
	OnEvent func(result.Event)
}

// RunTTY runs one command of a tool in a fresh sandbox on a terminal
// and returns its result. req.Stdin must be empty: input is t.Stdin.
func (c *Client) RunTTY(ctx context.Context, req api.RunRequest, t TTY) (*result.Result, error) {
	req.TTY = &t.Size
	return c.tty(ctx, "/v1/runs", req, t)
}

// ExecTTY runs a command in session id on a terminal and returns its
// result. req.Stdin must be empty: input is t.Stdin.
func (c *Client) ExecTTY(ctx context.Context, id string, req api.ExecRequest, t TTY) (*result.Result, error) {
	req.TTY = &t.Size
	return c.tty(ctx, "/v1/sessions/"+url.PathEscape(id)+"/exec", req, t)
}

func (c *Client) tty(ctx context.Context, path string, body any, t TTY) (*result.Result, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.TTYUpgrade)
	resp, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return nil, apiError(resp)
		}
		return nil, fmt.Errorf("airlock daemon: answered %s, not a switch to %s", resp.Status, api.TTYUpgrade)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("airlock daemon: the switched connection cannot be written")
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	in := &ttyWriter{w: conn}
	go func() {
		for {
			select {
			case ws := <-t.Resize:
				if in.send(api.TTYInput{Resize: &ws}) != nil {
					return
				}
			case <-done:
				return
			}
		}
	}()
	go func() {
		if t.Stdin != nil {
			buf := make([]byte, 16<<10)
			for {
				n, err := t.Stdin.Read(buf)
				if n > 0 && in.send(api.TTYInput{Data: buf[:n]}) != nil {
					return
				}
				if err != nil {
					break
				}
			}
		}
		_ = in.send(api.TTYInput{EOF: true})
	}()
	out := t.Output
	if out == nil {
		out = io.Discard
	}
	r, err := readEvents(conn, func(ev result.Event) {
		switch {
		case ev.Type == result.EventStdout || ev.Type == result.EventStderr:
			_, _ = out.Write(ev.Data)
		case t.OnEvent != nil:
			t.OnEvent(ev)
		}
	})
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r, err
}

// ttyWriter sends TTYInput lines; the typing and the resizing goroutines
// share it.
type ttyWriter struct {
	mu sync.Mutex // held across each line's write
	w  io.Writer
}

func (t *ttyWriter) send(in api.TTYInput) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err = t.w.Write(append(b, '\n'))
	return err
}

// ConsoleLogin asks the local daemon for a one-time link into its web
// console (the unix socket's call only).
func (c *Client) ConsoleLogin(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/console/login", struct{}{}, "application/json")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("airlock daemon: bad console login: %w", err)
	}
	return v.URL, nil
}

// PolicySuggestionQuery selects what GET
// /v1/tools/{name}/policy-suggestion reads.
type PolicySuggestionQuery struct {
	// Since and Until bound the decisions read: RFC 3339, or a duration
	// before now ("168h"); Since defaults to a week ago, Until to now.
	Since, Until string
	// Wildcards lets names under one parent collapse into *.parent.
	Wildcards bool
}

// PolicySuggestion asks the daemon for the narrowest egress and broker
// config of tool that would have allowed what its recorded runs needed.
func (c *Client) PolicySuggestion(ctx context.Context, tool string, q PolicySuggestionQuery) (*api.PolicySuggestion, error) {
	v := q.Values()
	path := "/v1/tools/" + url.PathEscape(tool) + "/policy-suggestion"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var s api.PolicySuggestion
	if err := c.getJSON(ctx, path, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Values are q as the policy suggestion's query parameters.
func (q PolicySuggestionQuery) Values() url.Values {
	v := url.Values{}
	if q.Since != "" {
		v.Set("since", q.Since)
	}
	if q.Until != "" {
		v.Set("until", q.Until)
	}
	if q.Wildcards {
		v.Set("wildcards", "true")
	}
	return v
}
