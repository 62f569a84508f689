package httpapi

import (
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// maxFile bounds one file written into or read out of a workspace.
const maxFile = node.MaxFile

// methods dispatches on the request method, answering 405 (in JSON, with
// Allow) for any other.
func methods(hs map[string]http.HandlerFunc) http.HandlerFunc {
	var allow []string
	for m := range hs {
		allow = append(allow, m)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if h, ok := hs[r.Method]; ok {
			h(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		edge.WriteErr(w, errdefs.Errorf(edge.ErrMethod, "%s is not allowed here", r.Method))
	}
}

func (d *Server) sessionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sessions", methods(map[string]http.HandlerFunc{
		http.MethodGet:  d.listSessions,
		http.MethodPost: d.postSession,
	}))
	mux.HandleFunc("/v1/sessions/{id}", methods(map[string]http.HandlerFunc{
		http.MethodGet:    d.getSession,
		http.MethodDelete: d.deleteSession,
	}))
	mux.HandleFunc("/v1/sessions/{id}/exec", edge.Only(http.MethodPost, d.postExec))
	mux.HandleFunc("/v1/sessions/{id}/pause", edge.Only(http.MethodPost, d.postPause))
	mux.HandleFunc("/v1/sessions/{id}/resume", edge.Only(http.MethodPost, d.postResume))
	mux.HandleFunc("/v1/sessions/{id}/files/{path...}", methods(map[string]http.HandlerFunc{
		http.MethodGet: d.getFile,
		http.MethodPut: d.putFile,
	}))
}

// decodeBody reads one JSON value into v, refusing unknown fields, more
// than one value and bodies over maxBody. It answers the error itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := httpx.JSONBody{Max: maxBody}.Decode(http.MaxBytesReader(w, r.Body, maxBody), v)
	switch {
	case err == nil:
		return true
	case errdefs.IsLimit(err):
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrLimit, "request body is over %d bytes", maxBody))
	case errdefs.IsInvalid(err):
		edge.WriteErr(w, errdefs.New(errdefs.ErrInvalid, "invalid JSON body: "+err.Error()))
	default:
		edge.WriteErr(w, errdefs.New(errdefs.ErrInvalid, "invalid JSON body: "+httpx.DescribeJSON(err)))
	}
	return false
}

func (d *Server) postSession(w http.ResponseWriter, r *http.Request) {
	var req api.SessionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Snapshot == "" && d.ForbidTool(w, r, req.Tool) {
		return
	}
	t, ok := d.tools().Tools[req.Tool]
	if !ok && req.Snapshot == "" {
		edge.WriteErr(w, d.noTool(req.Tool))
		return
	}
	life, err := node.ParseBound(req.MaxLifetime, node.DefaultLife, node.MaxLife, "max_lifetime")
	if err == nil {
		var idle time.Duration
		if idle, err = node.ParseBound(req.IdleTimeout, min(node.DefaultIdle, life), life, "idle_timeout"); err == nil {
			if req.Snapshot != "" {
				d.openFromSnapshot(w, r, req, idle, life)
				return
			}
			d.openSession(w, r, t.Name, idle, life, volumeMounts(req.Volumes))
			return
		}
	}
	edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
}

func (d *Server) openSession(w http.ResponseWriter, r *http.Request, tool string, idle, life time.Duration, mounts []node.VolumeMount) {
	s, err := d.OpenSessionWith(r.Context(), d.tools().Tools[tool], edge.ClientOf(r), edge.CallerOf(r.Context()), idle, life, nil, mounts)
	if err != nil {
		if r.Context().Err() == nil {
			edge.WriteErr(w, err)
		}
		return
	}
	edge.WriteJSON(w, http.StatusCreated, s.View())
}

// lookup finds the session of the request's {id}, answering that there is
// none itself.
func (d *Server) lookup(w http.ResponseWriter, r *http.Request) *node.Session {
	// A token sees only its own sessions; to others they do not exist.
	s, err := d.Session(edge.CallerOf(r.Context()), r.PathValue("id"))
	if err != nil {
		edge.WriteErr(w, err)
	}
	return s
}

// enterOrEnded registers a call in s, or answers that it has ended or is
// paused.
func enterOrEnded(w http.ResponseWriter, s *node.Session) bool {
	if s.Enter() {
		return true
	}
	err := s.EnterError()
	if err == nil {
		// Resumed in between: one more try, then the answer.
		if s.Enter() {
			return true
		}
		err = errdefs.Errorf(errdefs.ErrConflict, "session %s is pausing or ending", s.ID())
	}
	edge.WriteErr(w, err)
	return false
}

// postPause pauses a session: its processes frozen, its clocks stopped
// (docs/api.md). The answer is the paused session.
func (d *Server) postPause(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	if err := d.Pause(r.Context(), s, edge.ClientOf(r), node.PauseAsked); err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, s.View())
}

// postResume resumes a paused session; a body's max_lifetime, if
// given, is the least lifetime it has from now. Resuming a session that
// is not paused changes nothing.
func (d *Server) postResume(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	var req api.ResumeRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	life, err := node.ParseBound(req.MaxLifetime, 0, node.MaxLife, "max_lifetime")
	if err != nil {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
		return
	}
	if req.Files {
		_, _, err = d.ResumeFromFiles(r.Context(), s, edge.ClientOf(r), node.PauseAsked, life)
	} else {
		_, err = d.Resume(r.Context(), s, edge.ClientOf(r), node.PauseAsked, life)
	}
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, s.View())
}

// listSessions answers the sessions the caller may see (a token, its
// own), open and recently ended, oldest first.
func (d *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	mine := d.SessionsOf(edge.CallerOf(r.Context()))
	out := make([]api.Session, 0, len(mine))
	for _, s := range mine {
		out = append(out, s.View())
	}
	edge.WriteJSON(w, http.StatusOK, out)
}

func (d *Server) getSession(w http.ResponseWriter, r *http.Request) {
	if s := d.lookup(w, r); s != nil {
		edge.WriteJSON(w, http.StatusOK, s.View())
	}
}

func (d *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	// The answer comes once the sandbox is gone and the end recorded;
	// a caller that went away first gets none (the end goes on).
	if s.End(r.Context(), "deleted") != nil {
		return
	}
	// The end is recorded before it is acknowledged.
	if err := d.Audit().Append(r.Context()); err != nil {
		d.opts.Logger.Error("audit: a session's end could not be recorded", "session", s.ID(), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Server) postExec(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	var req api.ExecRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := checkTTY(r, req.TTY, req.Stdin); err != nil {
		edge.WriteErr(w, err)
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		edge.WriteErr(w, errNoCommand)
		return
	}
	if req.Workdir != "" && !path.IsAbs(req.Workdir) {
		edge.WriteErr(w, errRelativeWorkdir)
		return
	}
	if !enterOrEnded(w, s) {
		return
	}
	defer s.Leave()
	x := sandbox.ExecRequest{Argv: req.Argv, Env: req.Env, Dir: node.Workdir(req.Workdir, s.Tool())}
	if req.Stdin != "" {
		x.Stdin = strings.NewReader(req.Stdin)
	}
	if req.TTY != nil {
		d.execTTY(w, r, s, req.TTY, x)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), api.NDJSON) {
		x.Capture = true
		// Room for the output the answer holds (see capture.go), until
		// it is out.
		free, err := d.ReserveCapture(r.Context(), s.Tool(), nil)
		if err != nil {
			edge.WriteErr(w, err)
			return
		}
		defer free()
		res, err := d.Exec(r.Context(), s, edge.ClientOf(r), x)
		if err != nil {
			if r.Context().Err() == nil {
				edge.WriteErr(w, err)
			}
			return
		}
		writeResult(w, res)
		return
	}
	// The status goes out with the first event, after the run is
	// recorded: a refusal is still an error answer.
	ev := responseEvents(w, d.opts.StallTimeout)
	ctx, end := ev.context(r)
	defer end()
	x.OnEvent = ev.write
	w.Header().Set("Content-Type", api.NDJSON)
	res, err := d.Exec(ctx, s, edge.ClientOf(r), x)
	if err != nil {
		if r.Context().Err() == nil {
			edge.WriteErr(w, err)
		}
		return
	}
	ev.write(resultEvent(res))
}

func (d *Server) putFile(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil || !enterOrEnded(w, s) {
		return
	}
	defer s.Leave()
	if r.ContentLength > maxFile {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrLimit, "files are at most %d bytes", maxFile))
		return
	}
	n, err := s.WriteFile(r.PathValue("path"), r.Body)
	d.RecordFile(edge.ClientOf(r), s, "put", r.PathValue("path"), n, err)
	if err != nil {
		edge.WriteErr(w, node.FileError(err))
		return
	}
	w.Header().Set("X-Airlock-Bytes", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusNoContent)
}

func (d *Server) getFile(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil || !enterOrEnded(w, s) {
		return
	}
	defer s.Leave()
	f, size, err := s.OpenFile(r.PathValue("path"))
	d.RecordFile(edge.ClientOf(r), s, "get", r.PathValue("path"), size, err)
	if err != nil {
		edge.WriteErr(w, node.FileError(err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, io.LimitReader(f, size))
}

// execTTY runs an exec with a terminal: the connection switches to
// api.TTYUpgrade once the request is checked, and the exec's refusal, if
// any, comes as its result on the stream. The caller has entered s.
func (d *Server) execTTY(w http.ResponseWriter, r *http.Request, s *node.Session, size *api.TTYSize, x sandbox.ExecRequest) {
	if !d.ttys.add() {
		edge.WriteErr(w, node.ErrShutdown)
		return
	}
	defer d.ttys.done()
	t, ctx, end := d.newTTY(r.Context(), size)
	defer end()
	t.execRequest(&x)
	if err := t.upgrade(w); err != nil {
		if t.conn == nil {
			edge.WriteErr(w, err)
		}
		return
	}
	res, err := d.Exec(ctx, s, edge.ClientOf(r), x)
	if err != nil {
		res = &result.Result{SandboxID: s.Sandbox().ID(), Outcome: result.Error, Error: err.Error()}
	}
	t.events.write(resultEvent(res))
}
