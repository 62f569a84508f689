package e2bserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/interp"
	"github.com/airlockhq/airlock/internal/netlimit"
	"github.com/airlockhq/airlock/internal/node"
)

// The code interpreter's contexts (E2B's /contexts): each is a language,
// a working directory and a kernel of its own, whose state lasts as long
// as the context. A sandbox has a default context per language, made on
// first use (Python's is listed from the start, as E2B lists it); others
// are made by POST /contexts. Executions in one context run one at a
// time (interp.Kernel).

// InterpreterPort is the sandbox port E2B's code interpreter SDKs name
// (E2b-Sandbox-Port) for their calls.
const InterpreterPort = "49999"

// MaxContexts bounds a sandbox's contexts, each a kernel (a process of
// the sandbox and, on the host, its pipes).
const MaxContexts = 32

// e2bContext is one code context of a sandbox.
type e2bContext struct {
	id, language, cwd string

	// mu guards kernel and deleted; it is held while the kernel starts,
	// so a context's kernel starts once.
	mu      sync.Mutex
	kernel  *node.Kernel
	deleted bool
}

// contextJSON is a context as E2B's API gives it.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	CWD      string `json:"cwd"`
}

func (c *e2bContext) json() contextJSON {
	return contextJSON{ID: c.id, Language: c.language, CWD: c.cwd}
}

// contextID is a new context's id, in the form of E2B's (a UUID).
func contextID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// language is the context language a client named, as E2B reads it
// (lower case; js and ts by their names), or its refusal when airlock
// does not serve it.
func language(asked *string) (string, error) {
	if asked == nil || strings.TrimSpace(*asked) == "" {
		return "python", nil
	}
	l := strings.ToLower(strings.TrimSpace(*asked))
	switch l {
	case "js":
		l = "javascript"
	case "ts":
		l = "typescript"
	}
	if !slices.Contains(interp.Languages, l) {
		return "", errdefs.Errorf(errdefs.ErrInvalid, "language %q is not served: airlock's code interpreter runs %s (docs/e2b.md)",
			node.Shorten(l), strings.Join(interp.Languages, " and "))
	}
	return l, nil
}

// checkCWD refuses a working directory that cannot be one: it must be
// absolute and clean. Whether it exists is the kernel's to say.
func checkCWD(cwd string) error {
	if !strings.HasPrefix(cwd, "/") || path.Clean(cwd) != cwd || len(cwd) > 1024 || strings.ContainsRune(cwd, 0) {
		return errdefs.Errorf(errdefs.ErrInvalid, "cwd %q: want an absolute, clean path", node.Shorten(cwd))
	}
	return nil
}

// newContext adds a context to sb, the default of its language when def.
// The caller holds sb.ctxMu.
func (sb *e2bSandbox) newContext(language, cwd string, def bool) (*e2bContext, error) {
	if len(sb.contexts) >= MaxContexts {
		return nil, errdefs.Errorf(errdefs.ErrConflict, "the sandbox has %d code contexts, the most it may have; delete one first", MaxContexts)
	}
	if cwd == "" {
		cwd = node.Workdir("", sb.s.Tool())
	}
	c := &e2bContext{id: contextID(), language: language, cwd: cwd}
	sb.contexts = append(sb.contexts, c)
	if def {
		if sb.defaults == nil {
			sb.defaults = map[string]*e2bContext{}
		}
		sb.defaults[language] = c
	}
	return c, nil
}

// adoptKernels makes the kernels sb's sandbox started before its claim
// (the tool's pool.kernels) its default contexts, given the create's
// envVars: the first runCode finds its context running.
func (sb *e2bSandbox) adoptKernels(ctx context.Context, envVars map[string]string) {
	for _, l := range interp.Languages {
		k := sb.s.TakeKernel(l)
		if k == nil {
			continue
		}
		if len(envVars) > 0 {
			if err := k.SetEnv(ctx, envVars); err != nil {
				k.Kill()
				continue
			}
		}
		sb.ctxMu.Lock()
		c, err := sb.newContext(l, "", true)
		sb.ctxMu.Unlock()
		if err != nil {
			k.Kill()
			continue
		}
		c.kernel = k
	}
}

// defaultContext is sb's default context of language, made if it has
// none.
func (sb *e2bSandbox) defaultContext(language string) (*e2bContext, error) {
	sb.ctxMu.Lock()
	defer sb.ctxMu.Unlock()
	if c := sb.defaults[language]; c != nil {
		return c, nil
	}
	return sb.newContext(language, "", true)
}

// findContext is sb's context id, or nil.
func (sb *e2bSandbox) findContext(id string) *e2bContext {
	sb.ctxMu.Lock()
	defer sb.ctxMu.Unlock()
	for _, c := range sb.contexts {
		if c.id == id {
			return c
		}
	}
	return nil
}

// errNoContext is the answer for a context that is not there, worded as
// E2B's (the SDK reads 404 as its NotFoundError).
func errNoContext(id string) error {
	return errdefs.Errorf(errdefs.ErrNotFound, "Context %s not found", node.Shorten(id))
}

// contextOf is the context an execution runs in: the one it names, the
// default one of the language it names, else the default Python one.
func (sb *e2bSandbox) contextOf(req executeRequest) (*e2bContext, error) {
	if req.ContextID != nil && req.Language != nil {
		return nil, errdefs.New(errdefs.ErrInvalid, "Only one of context_id or language can be provided")
	}
	if req.ContextID != nil {
		if c := sb.findContext(*req.ContextID); c != nil {
			return c, nil
		}
		return nil, errNoContext(*req.ContextID)
	}
	l, err := language(req.Language)
	if err != nil {
		return nil, err
	}
	return sb.defaultContext(l)
}

// kernelOf is c's running kernel, started if it has none (on first use,
// or after the last one broke or its sandbox's limit ended it).
func (d *Server) kernelOf(r *http.Request, sb *e2bSandbox, c *e2bContext) (*node.Kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil, errNoContext(c.id)
	}
	if kp := c.kernel; kp != nil && !kp.Dead() {
		return kp, nil
	}
	kp, err := d.startKernel(r.Context(), edge.ClientOf(r), sb, c)
	if err != nil {
		return nil, err
	}
	c.kernel = kp
	return kp, nil
}

// e2bCreateContext is POST /contexts {language?, cwd?}: a context whose
// kernel starts now, so that a working directory that is not one is
// refused here rather than at its first execution.
func (d *Server) e2bCreateContext(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bInterpreter(r)
	if err != nil {
		return err
	}
	var req struct {
		Language *string `json:"language"`
		CWD      *string `json:"cwd"`
	}
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	l, err := language(req.Language)
	if err != nil {
		return err
	}
	cwd := ""
	if req.CWD != nil && *req.CWD != "" {
		if err := checkCWD(*req.CWD); err != nil {
			return err
		}
		cwd = *req.CWD
	}
	sb.ctxMu.Lock()
	c, err := sb.newContext(l, cwd, false)
	sb.ctxMu.Unlock()
	if err != nil {
		return err
	}
	if _, err := d.kernelOf(r, sb, c); err != nil {
		sb.dropContext(c)
		return err
	}
	edge.WriteJSON(w, http.StatusOK, c.json())
	return nil
}

// e2bListContexts is GET /contexts: the sandbox's contexts in the order
// they were made, the default Python one first.
func (d *Server) e2bListContexts(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bInterpreter(r)
	if err != nil {
		return err
	}
	if _, err := sb.defaultContext("python"); err != nil {
		return err
	}
	sb.ctxMu.Lock()
	list := make([]contextJSON, 0, len(sb.contexts))
	for _, c := range sb.contexts {
		list = append(list, c.json())
	}
	sb.ctxMu.Unlock()
	edge.WriteJSON(w, http.StatusOK, list)
	return nil
}

// e2bRestartContext is POST /contexts/{id}/restart: the context's kernel
// ended (an execution in flight is told so) and a fresh one started, its
// state gone; the context keeps its id, language and directory.
func (d *Server) e2bRestartContext(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bInterpreter(r)
	if err != nil {
		return err
	}
	c := sb.findContext(r.PathValue("id"))
	if c == nil {
		return errNoContext(r.PathValue("id"))
	}
	c.mu.Lock()
	if kp := c.kernel; kp != nil {
		kp.EndFor(interp.Event{Type: "error", Name: "ContextRestarting", Value: "Context was restarted"})
		c.kernel = nil
	}
	c.mu.Unlock()
	if _, err := d.kernelOf(r, sb, c); err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusOK, nil)
	return nil
}

// e2bDeleteContext is DELETE /contexts/{id}: the context and its kernel
// gone (an execution in flight is told so). A default context deleted is
// made again, fresh, when next used.
func (d *Server) e2bDeleteContext(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bInterpreter(r)
	if err != nil {
		return err
	}
	c := sb.findContext(r.PathValue("id"))
	if c == nil {
		return errNoContext(r.PathValue("id"))
	}
	sb.dropContext(c)
	edge.WriteJSON(w, http.StatusOK, nil)
	return nil
}

// dropContext takes c out of sb and ends its kernel.
func (sb *e2bSandbox) dropContext(c *e2bContext) {
	sb.ctxMu.Lock()
	sb.contexts = slices.DeleteFunc(sb.contexts, func(x *e2bContext) bool { return x == c })
	if sb.defaults[c.language] == c {
		delete(sb.defaults, c.language)
	}
	sb.ctxMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted = true
	if kp := c.kernel; kp != nil {
		kp.EndFor(interp.Event{Type: "error", Name: "ContextDeleted", Value: "Context was deleted"})
		c.kernel = nil
	}
}

// e2bInterpreter finds the sandbox of a code interpreter call: its
// E2b-Sandbox-Id, checked against its envd access token (X-Access-Token,
// which runCode sends) or its traffic access token
// (E2B-Traffic-Access-Token, which the SDK sends on every interpreter
// call once create has given it one). A call with neither finds nothing.
func (d *Server) e2bInterpreter(r *http.Request) (*e2bSandbox, error) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "E2b-Sandbox-Id is required")
	}
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	ok := sb != nil &&
		(subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(sb.token)) == 1 ||
			subtle.ConstantTimeCompare([]byte(r.Header.Get("E2B-Traffic-Access-Token")), []byte(sb.traffic)) == 1)
	if !ok {
		d.Counts().Unauthorized.Add(1)
		return nil, errdefs.Errorf(errEnded, "sandbox %q was not found, or the access token is not its", node.Shorten(id))
	}
	netlimit.Vouch(r.Context())
	if err := d.awake(r, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

// interp serves a code interpreter call whose error, if it returns one,
// is answered as E2B's interpreter answers: the status (apiStatus), the
// message as plain text, which the SDKs put in the error they raise.
func interpAnswer(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeInterpError(w, err)
		}
	}
}

func writeInterpError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(apiStatus(err))
	_, _ = w.Write([]byte(err.Error()))
}

// e2bInterpreterHealth is the interpreter's GET /health: "OK" while the
// sandbox lives and the token is its.
func (d *Server) e2bInterpreterHealth(w http.ResponseWriter, r *http.Request) error {
	if _, err := d.e2bInterpreter(r); err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusOK, "OK")
	return nil
}
