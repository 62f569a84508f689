package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// fakeCore is a node for the API's protocol tests: no sandbox, no root.
// Its run is run; the rest answers as a node with no sessions would.
type fakeCore struct {
	cfg    *config.Config
	counts node.Counters
	run    func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)
}

var _ Core = (*fakeCore)(nil)
var _ edge.Core = (*fakeCore)(nil)

func (f *fakeCore) Tools() *config.Config              { return nil }
func (f *fakeCore) Activity(*node.Caller) api.Activity { return api.Activity{} }
func (f *fakeCore) Audit() *audit.Log                  { return nil }
func (f *fakeCore) Counts() *node.Counters             { return &f.counts }
func (f *fakeCore) Authorize(c *node.Caller, tool string) error {
	if c == nil {
		return node.ErrNoCaller
	}
	if !c.Allows(tool) {
		return errdefs.Errorf(errdefs.ErrDenied, "%s may not use tool %q", c.Name, tool)
	}
	return nil
}
func (f *fakeCore) Exec(context.Context, *node.Session, string, sandbox.ExecRequest) (*result.Result, error) {
	return nil, errors.New("no sessions here")
}
func (f *fakeCore) Kill(context.Context, *node.Caller, string, string) error {
	return errdefs.New(errdefs.ErrNotFound, "no run in flight")
}
func (f *fakeCore) OpenSession(context.Context, *config.Tool, string, *node.Caller, time.Duration, time.Duration, *attach.Policy) (*node.Session, error) {
	return nil, node.ErrShutdown
}
func (f *fakeCore) Pause(context.Context, *node.Session, string, string) error {
	return errors.New("not in this fake")
}
func (f *fakeCore) Resume(context.Context, *node.Session, string, string, time.Duration) (bool, error) {
	return false, errors.New("not in this fake")
}
func (f *fakeCore) ResumeFromFiles(context.Context, *node.Session, string, string, time.Duration) (bool, bool, error) {
	return false, false, errors.New("not in this fake")
}
func (f *fakeCore) Snapshot(context.Context, *node.Session, *node.Caller, string, string) (snapshot.Meta, error) {
	return snapshot.Meta{}, errors.New("not in this fake")
}
func (f *fakeCore) Snapshots(*node.Caller) ([]snapshot.Meta, error) { return nil, nil }
func (f *fakeCore) FindSnapshot(*node.Caller, string) (snapshot.Meta, error) {
	return snapshot.Meta{}, snapshot.ErrNotFound
}
func (f *fakeCore) DeleteSnapshot(*node.Caller, string, string) error { return snapshot.ErrNotFound }
func (f *fakeCore) OpenFromSnapshot(context.Context, snapshot.Meta, string, *node.Caller, time.Duration, time.Duration, *attach.Policy, []node.VolumeMount) (*node.Session, error) {
	return nil, node.ErrShutdown
}
func (f *fakeCore) Fork(context.Context, *node.Session, *node.Caller, string, int, time.Duration) ([]node.Forked, error) {
	return nil, errors.New("not in this fake")
}
func (f *fakeCore) OpenSessionWith(context.Context, *config.Tool, string, *node.Caller, time.Duration, time.Duration, *attach.Policy, []node.VolumeMount) (*node.Session, error) {
	return nil, node.ErrShutdown
}
func (f *fakeCore) CreateVolume(context.Context, *node.Caller, string, string, int64) (volume.Meta, error) {
	return volume.Meta{}, errors.New("not in this fake")
}
func (f *fakeCore) Volumes(*node.Caller) ([]volume.Meta, error) { return nil, nil }
func (f *fakeCore) FindVolume(*node.Caller, string) (volume.Meta, error) {
	return volume.Meta{}, volume.ErrNotFound
}
func (f *fakeCore) DeleteVolume(*node.Caller, string, string) error { return volume.ErrNotFound }
func (f *fakeCore) Usage() sandbox.Usage                            { return sandbox.Usage{} }
func (f *fakeCore) WriteMetrics(io.Writer) error                    { return nil }
func (f *fakeCore) Budget() sandbox.Budget                          { return sandbox.Budget{} }
func (f *fakeCore) Plan(string) attach.Plan                         { return attach.Plan{} }
func (f *fakeCore) PoolStats(tool string) (pool.Stats, bool) {
	_, ok := f.cfg.Tools[tool]
	return pool.Stats{Name: tool}, ok
}
func (f *fakeCore) Quitting() context.Context                                      { return context.Background() }
func (f *fakeCore) RecordFile(string, *node.Session, string, string, int64, error) {}
func (f *fakeCore) ReserveCapture(context.Context, *config.Tool, *sandbox.Limits) (func(), error) {
	return func() {}, nil
}
func (f *fakeCore) Run(ctx context.Context, j node.RunRequest) (*result.Result, func(), error) {
	return f.run(ctx, j)
}
func (f *fakeCore) Session(*node.Caller, string) (*node.Session, error) {
	return nil, errdefs.New(errdefs.ErrNotFound, "no session")
}
func (f *fakeCore) SessionsOf(*node.Caller) []*node.Session { return nil }

// serveFake serves the API over a fake core on a unix socket, every
// request made by c (nil: by nobody, as a listener wired without
// authentication would).
func serveFake(t *testing.T, c *node.Caller, stall time.Duration, run func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error)) (*fakeCore, string) {
	t.Helper()
	cfg, err := config.Parse("a.yaml", []byte("tools:\n  sh: {}\n  other: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCore{cfg: cfg, run: run}
	s := New(f, edge.NewGuard(f, &tokens.Set{}, nil), Options{Config: cfg, StallTimeout: stall})
	h := s.Handler()
	if c != nil {
		h = edge.WithCaller(c, h)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return f, sock
}

// TestRunProtocol drives POST /v1/runs through the edge alone: what the
// core is asked, what the caller is answered, for a result, a refusal
// that says when to try again, a tool outside the caller's scope and a
// request with no caller. No sandbox is made: the edge's translation is
// what is tested, and it needs no root.
func TestRunProtocol(t *testing.T) {
	var asked node.RunRequest
	var done atomic.Bool
	ok := func(_ context.Context, j node.RunRequest) (*result.Result, func(), error) {
		asked = j
		return &result.Result{Outcome: result.Exited, ExitCode: 3, Stdout: result.Output("hi\n"), RunID: "r_1"}, func() { done.Store(true) }, nil
	}
	_, sock := serveFake(t, node.Local, time.Second, ok)
	res, err := client.New(sock).Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"echo", "hi"}, Env: []string{"A=1"}, Workdir: "/tmp"})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "hi\n" || res.RunID != "r_1" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if asked.Tool.Name != "sh" || asked.Caller != node.Local || !asked.Capture || asked.Dir != "/tmp" ||
		strings.Join(asked.Argv, " ") != "echo hi" || strings.Join(asked.Env, ",") != "A=1" {
		t.Errorf("the core was asked %+v", asked)
	}
	for deadline := time.Now().Add(5 * time.Second); !done.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run's done was not called after its answer")
		}
	}

	refused := func(context.Context, node.RunRequest) (*result.Result, func(), error) {
		return nil, nil, &node.Refusal{Kind: node.ErrTooMany, RetryAfter: 1, Msg: "token ci has 2 calls in flight"}
	}
	never := func(context.Context, node.RunRequest) (*result.Result, func(), error) {
		t.Error("the core was asked to run a refused request")
		return nil, nil, errors.New("unreachable")
	}
	scoped := node.TokenCaller(&config.Token{Name: "ci", Tools: []string{"sh"}})
	for _, tt := range []struct {
		name       string
		caller     *node.Caller
		run        func(context.Context, node.RunRequest) (*result.Result, func(), error)
		tool       string
		status     int
		code       string
		retryAfter string
	}{
		{"refusal", node.Local, refused, "sh", 429, api.CodeTooManyRequests, "1"},
		{"out of scope", scoped, never, "other", 403, api.CodeForbidden, ""},
		{"no such tool", node.Local, never, "nope", 404, api.CodeNotFound, ""},
		{"no caller", nil, never, "sh", 401, api.CodeUnauthorized, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, sock := serveFake(t, tt.caller, time.Second, tt.run)
			resp, body := post(t, sock, "/v1/runs", fmt.Sprintf(`{"tool":%q,"argv":["true"]}`, tt.tool))
			var e api.Error
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != tt.status || e.Code != tt.code || resp.Header.Get("Retry-After") != tt.retryAfter {
				t.Errorf("got %d %s Retry-After %q (%s), want %d %s %q", resp.StatusCode, e.Code, resp.Header.Get("Retry-After"), body, tt.status, tt.code, tt.retryAfter)
			}
		})
	}
}

// TestRunStreamProtocol: a streamed run's events reach the caller as
// NDJSON lines, its result last; a caller that stops reading them ends
// the run, the core told why (the stall, not a caller gone).
func TestRunStreamProtocol(t *testing.T) {
	_, sock := serveFake(t, node.Local, time.Second, func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error) {
		if err := j.Started(); err != nil {
			return nil, nil, err
		}
		for i := range 3 {
			j.OnEvent(result.Event{Type: result.EventStdout, Data: result.Output(fmt.Sprintf("line %d\n", i))})
		}
		return &result.Result{Outcome: result.Exited}, func() {}, nil
	})
	var got []string
	res, err := client.New(sock).RunStream(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"x"}}, func(ev result.Event) {
		got = append(got, string(ev.Data))
	})
	if err != nil || res.Outcome != result.Exited || strings.Join(got, "") != "line 0\nline 1\nline 2\n" {
		t.Fatalf("stream: %q %+v %v", got, res, err)
	}

	cause := make(chan error, 1)
	_, sock = serveFake(t, node.Local, 300*time.Millisecond, func(ctx context.Context, j node.RunRequest) (*result.Result, func(), error) {
		if err := j.Started(); err != nil {
			return nil, nil, err
		}
		chunk := []byte(strings.Repeat("y\n", 32<<10))
		for ctx.Err() == nil {
			j.OnEvent(result.Event{Type: result.EventStdout, Data: result.Output(chunk)})
		}
		cause <- context.Cause(ctx)
		return &result.Result{Outcome: result.Error, Error: context.Cause(ctx).Error()}, func() {}, nil
	})
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"tool":"sh","argv":["yes"]}`
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: airlock\r\nAccept: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", api.NDJSON, len(body), body)
	select {
	case err := <-cause:
		if !errors.Is(err, errStalled) {
			t.Errorf("the run ended with %v, want its caller's stall", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a run whose caller stopped reading is still going after 20 s")
	}
}

// post sends one request on a fresh connection and reads the answer.
func post(t *testing.T, sock, path, body string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, []byte(b.String())
}
