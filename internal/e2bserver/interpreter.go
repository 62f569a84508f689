package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/interp"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/result"
)

// The code interpreter (docs/e2b.md; decision 0026): E2B's
// @e2b/code-interpreter and e2b-code-interpreter SDKs send runCode to the
// sandbox's port 49999 (E2b-Sandbox-Port), POST /execute, and read its
// answer as JSON lines. Each context (contexts.go) is a real kernel
// (internal/interp: IPython for Python, a bash that keeps its state) run
// in the sandbox as a command of its session; its output is translated
// here, line by line, and nothing it says is trusted.

// silenceKeepalive: an execution that says nothing for this long sends
// a keepalive line, as E2B's server does.
const silenceKeepalive = 5 * time.Second

// startKernel starts c's kernel in sb (node.StartKernel: a run of the
// session), its errors as the interpreter answers them.
func (d *Server) startKernel(ctx context.Context, client string, sb *e2bSandbox, c *e2bContext) (*node.Kernel, error) {
	k, err := d.StartKernel(ctx, sb.s, client, c.language, c.cwd, sb.env)
	switch {
	case err == nil:
		return k, nil
	case errors.Is(err, node.ErrGone):
		return nil, errdefs.Errorf(errEnded, "sandbox %q was not found: it has ended", sb.s.ID())
	case errors.Is(err, interp.ErrStart):
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the %s context did not start: %v", c.language, err)
	}
	return nil, errdefs.Errorf(errdefs.ErrUnavailable, "the sandbox's %s kernel did not start (the tool's image needs python3 with IPython, and bash for bash: docs/e2b.md)", c.language)
}

// executeRequest is POST /execute's body. The JS SDK leaves absent
// fields out, the Python SDK sends them as null: both are taken.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// e2bExecute is POST /execute: code run in a context (the one named, the
// default one of the language named, else the default Python one), its
// output as JSON lines in E2B's order.
func (d *Server) e2bExecute(w http.ResponseWriter, r *http.Request) {
	sb, err := d.e2bInterpreter(r)
	if err != nil {
		writeInterpError(w, err)
		return
	}
	var req executeRequest
	if err := e2bDecode(r, &req); err != nil {
		writeInterpError(w, err)
		return
	}
	c, err := sb.contextOf(req)
	if err == nil {
		err = checkEnv(req.EnvVars)
	}
	if err != nil {
		writeInterpError(w, err)
		return
	}
	kp, err := d.kernelOf(r, sb, c)
	if err != nil {
		writeInterpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := &executeStream{out: httpx.NewStream(w, d.opts.StallTimeout), last: time.Now()}
	// The execution ends with its client: a client gone, or one that
	// stopped reading, interrupts it; the context keeps its state.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	out.failed = cancel
	stop := out.keepalive()
	defer stop()
	start := time.Now()
	net := sb.s.NetWindow()
	err = kp.Execute(ctx, req.Code, req.EnvVars, out.event)
	// The code's refusals (internal/refusal) follow its own stderr, once
	// each, as a command's do: an agent reads why its requests.get or
	// pip install failed in the execution's logs.
	if t := refusal.Text(net()); t != "" {
		out.event(interp.Event{Type: "stderr", Text: t})
	}
	var breach *node.LimitError
	switch {
	case errors.As(err, &breach):
		out.event(interp.Event{Type: "error", Name: "LimitExceeded", Value: breach.Error()})
	case errors.Is(err, interp.ErrBroken):
		out.event(kernelEnd(kp, sb.s))
	}
	out.mu.Lock()
	count, errName := out.count, out.errName
	out.mu.Unlock()
	d.RecordCode(edge.ClientOf(r), sb.s, node.Code{Code: req.Code, Language: c.language, Context: c.id,
		Count: count, ErrName: errName, Took: time.Since(start), Err: err})
	out.line(map[string]any{"type": "end_of_execution"})
	out.out.End()
}

// envName is what a per-call variable's name may be: one every language
// takes (bash's rule).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnv refuses per-call variables no language could set.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if !envName.MatchString(k) {
			return errdefs.Errorf(errdefs.ErrInvalid, "env_vars: %q is not a variable name (letters, digits and _, not first a digit)", node.Shorten(k))
		}
		if strings.ContainsRune(v, 0) {
			return errdefs.Errorf(errdefs.ErrInvalid, "env_vars: %s's value holds a NUL byte", k)
		}
	}
	return nil
}

// executeStream writes an execution's lines.
type executeStream struct {
	mu   sync.Mutex // guards out, last, gone, count and errName
	out  *httpx.Stream
	last time.Time
	gone bool
	// count is the execution's number; errName its first error's name,
	// the one E2B sends.
	count   int
	errName string
	failed  context.CancelCauseFunc
}

// line writes one line, unless the client is gone.
func (s *executeStream) line(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return
	}
	s.last = time.Now()
	if err := s.out.Send(append(b, '\n')); err != nil {
		s.gone = true
		if s.failed != nil {
			s.failed(fmt.Errorf("the client's stream broke: %w", err))
		}
	}
}

// keepalive sends a keepalive line after each silence of
// silenceKeepalive, until stop.
func (s *executeStream) keepalive() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(silenceKeepalive / 5)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.mu.Lock()
				quiet := time.Since(s.last) >= silenceKeepalive
				s.mu.Unlock()
				if quiet {
					s.line(map[string]any{"type": "keepalive"})
				}
			}
		}
	}()
	return func() { close(done) }
}

// resultKeys are E2B's names of a result's forms, by MIME type; other
// forms go in its "extra".
var resultKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	// E2B's own forms (the bridge's formatters).
	"e2b/data":  "data",
	"e2b/chart": "chart",
}

// event writes one of the kernel's events as E2B's line.
func (s *executeStream) event(ev interp.Event) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	switch ev.Type {
	case "count":
		s.mu.Lock()
		s.count = ev.Count
		s.mu.Unlock()
		s.line(map[string]any{"type": "number_of_executions", "execution_count": ev.Count})
	case "stdout", "stderr":
		s.line(map[string]any{"type": ev.Type, "text": ev.Text, "timestamp": now})
	case "result":
		line := map[string]any{"type": "result", "is_main_result": ev.Main}
		extra := map[string]json.RawMessage{}
		for mime, v := range ev.Data {
			if k, ok := resultKeys[mime]; ok {
				line[k] = v
			} else {
				extra[mime] = v
			}
		}
		if len(extra) > 0 {
			line["extra"] = extra
		}
		s.line(line)
	case "error":
		s.mu.Lock()
		first := s.errName == ""
		if first {
			s.errName = ev.Name
			if s.errName == "" {
				s.errName = "Error"
			}
		}
		s.mu.Unlock()
		if first {
			s.line(map[string]any{"type": "error", "name": ev.Name, "value": ev.Value, "traceback": ev.Traceback})
		}
	}
}

// kernelEnd is the error an execution ends with when its kernel broke:
// why it was ended, when that was on purpose (a restart, a delete); the
// limit its sandbox breached, by name, when that ended it (the sandbox
// is then gone, and later calls find nothing); the sandbox's end when it
// was killed or timed out under the execution, which is not the kernel's
// doing; else the kernel is ended, and the next call starts another, its
// state gone.
func kernelEnd(k *node.Kernel, s *node.Session) interp.Event {
	if why := k.Why(); why != nil {
		return *why
	}
	k.Kill()
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
	}
	if end := k.End(); k.Dead() && end != nil && end.Outcome == result.LimitExceeded && end.Limit != nil {
		return interp.Event{Type: "error", Name: "LimitExceeded", Value: "the sandbox breached its " + end.Limit.String() + " and was destroyed"}
	}
	// The session is marked ended before its sandbox is killed, so a
	// kernel that a kill (E2B's kill, the sandbox's timeout) took down
	// finds it so.
	if v := s.View(); v.State != "active" {
		return interp.Event{Type: "error", Name: "SandboxEnded", Value: "the sandbox ended (" + v.EndReason + ") during the execution"}
	}
	return interp.Event{Type: "error", Name: "KernelError", Value: "the kernel broke its protocol and was ended; its state is lost"}
}
