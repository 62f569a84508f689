package e2bserver

import (
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/sandbox"
)

// The E2B file calls: /files and the filesystem.Filesystem service.

// e2bLoc is a path the files API reaches: below one of the sandbox's own
// writable directories (sandbox.ScratchDirs: the workspace, /tmp; its
// volumes; and "/" when its root is writable), resolved inside it
// without crossing into another mount; rel "" is the directory itself.
type e2bLoc struct {
	dir, rel string
	// ro: below the sandbox's read-only root, which the files API reads
	// (as the sandbox can) and never writes.
	ro bool
}

// writable refuses a write (an upload, a new directory, a move, a
// removal, a watch) to a path below a read-only root.
func (l e2bLoc) writable() error {
	if l.ro {
		return errdefs.Errorf(errdefs.ErrDenied, "%s: the sandbox's root is read-only (its tool's is not `rootfs: writable`): files are written, moved, removed and watched below %s and the sandbox's volumes", l, strings.Join(sandbox.ScratchDirs, " and "))
	}
	return nil
}

// String is the path as the sandbox sees it.
func (l e2bLoc) String() string {
	switch {
	case l.rel == "":
		return l.dir
	case l.dir == "/":
		return "/" + l.rel
	}
	return l.dir + "/" + l.rel
}

// path is an E2B file path as a path below one of the sandbox's own
// directories (fsPath), which may not be the directory itself.
func (sb *e2bSandbox) path(p string) (e2bLoc, error) {
	l, err := sb.fsPath(p)
	if err == nil && l.rel == "" {
		err = errdefs.Errorf(errdefs.ErrInvalid, "path %q is a directory the files API cannot replace", node.Shorten(p))
	}
	return l, err
}

// fsPath is an E2B file path as a path below one of the sandbox's own
// directories (an absolute one under one of them, a relative one from
// the tool's working directory, as E2B's are from the user's home), or
// below its root: writable when the tool's root is, else read-only
// (loc.ro: read, listed and described, never written). Another mount
// below the root (/proc, /dev) is never reached: inroot does not cross
// mounts.
func (sb *e2bSandbox) fsPath(p string) (e2bLoc, error) {
	if p == "" {
		return e2bLoc{}, errdefs.New(errdefs.ErrInvalid, "path is required")
	}
	c := p
	if !path.IsAbs(p) {
		if p != "." {
			if err := checkRel(p); err != nil {
				return e2bLoc{}, err
			}
		}
		c = path.Join(node.Workdir("", sb.s.Tool()), p)
	}
	c = path.Clean(c)
	// The volumes too, each the root of its own file system, the
	// deepest first: one may be attached below another, and a path is
	// resolved from the mount it lies on (inroot does not cross mounts).
	dirs := sb.s.Sandbox().VolumeDirs()
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, dir := range append(dirs, sandbox.ScratchDirs...) {
		if c == dir {
			return e2bLoc{dir: dir}, nil
		}
		if rel, ok := strings.CutPrefix(c, dir+"/"); ok {
			if err := checkRel(rel); err != nil {
				return e2bLoc{}, err
			}
			return e2bLoc{dir: dir, rel: rel}, nil
		}
	}
	ro := !sb.s.Sandbox().WritableRoot()
	if c == "/" {
		return e2bLoc{dir: "/", ro: ro}, nil
	}
	if err := checkRel(c[1:]); err != nil {
		return e2bLoc{}, err
	}
	return e2bLoc{dir: "/", rel: c[1:], ro: ro}, nil
}

// checkRel refuses a relative path with empty, "." or ".." elements.
func checkRel(p string) error {
	for _, e := range strings.Split(p, "/") {
		if e == "" || e == "." || e == ".." || strings.ContainsRune(e, 0) {
			return errdefs.Errorf(errdefs.ErrInvalid, "path %q: empty, \".\" and \"..\" elements are refused", node.Shorten(p))
		}
	}
	return nil
}

// e2bFileSandbox finds the sandbox of a files call and enters it: by its
// E2b-Sandbox-Id and access token, or, for a signed download or upload
// URL (which carries neither), by the signature, made with one sandbox's
// token over the path, the operation (op), the user and the expiry.
func (d *Server) e2bFileSandbox(r *http.Request, op string) (*e2bSandbox, error) {
	var sb *e2bSandbox
	var err error
	if r.Header.Get("E2b-Sandbox-Id") == "" && r.URL.Query().Has("signature") {
		// Answered as envd answers a signature: 401 and why, alone.
		if sb, err = d.e2bSigned(r, op); err != nil {
			return nil, err
		}
	} else if sb, err = d.e2bEnvd(r); err != nil {
		// Worded as envd's Connect error: its code, then why.
		return nil, fmt.Errorf("%s: %w", rpcCode(err), err)
	}
	// The SDKs name the user of a files call in the query.
	if err := checkUser(r.URL.Query().Get("username")); err != nil {
		return nil, err
	}
	if !sb.s.Enter() {
		return nil, errEnded
	}
	return sb, nil
}

// e2bSigned finds the sandbox whose token signed the request's URL. The
// signature is checked before the expiry, so that a forger never learns
// whether the expiry was what failed.
func (d *Server) e2bSigned(r *http.Request, op string) (*e2bSandbox, error) {
	q := r.URL.Query()
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		var err error
		if exp, err = strconv.ParseInt(v, 10, 64); err != nil || exp <= 0 {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "signature_expiration %q is not a time in Unix seconds", node.Shorten(v))
		}
	}
	// The signed string's fields are not delimited: refused unless they
	// can be told apart (e2b.CheckSigned says why).
	if err := e2b.CheckSigned(q.Get("path"), q.Get("username")); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "%v", err)
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
	if found == nil {
		d.Counts().Unauthorized.Add(1)
		return nil, errBadSignature
	}
	if exp != 0 && time.Now().Unix() > exp {
		return nil, errSignatureExpired
	}
	if err := d.awake(r, found); err != nil {
		return nil, err
	}
	return found, nil
}

func (d *Server) e2bReadFile(w http.ResponseWriter, r *http.Request) error {
	sb, err := d.e2bFileSandbox(r, "read")
	if err != nil {
		return err
	}
	defer sb.s.Leave()
	loc, err := sb.path(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	f, size, err := sb.s.OpenFileIn(loc.dir, loc.rel)
	if err != nil {
		return node.FileError(err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, io.LimitReader(f, size))
	return nil
}

// e2bFSError is a file operation's failure on p as envd words it, in
// the class (or kind) its Connect code comes from (rpcCode): what the
// caller sees names p, never a host path.
func e2bFSError(p string, err error) error {
	p = node.Shorten(p)
	switch {
	case errors.Is(err, inroot.ErrNotFound):
		return errdefs.Errorf(errdefs.ErrNotFound, "%s: no such file or directory", p)
	case errors.Is(err, inroot.ErrExists):
		return errdefs.Errorf(inroot.ErrExists, "%s: %v", p, err)
	case errors.Is(err, inroot.ErrPath):
		return errdefs.Errorf(errdefs.ErrInvalid, "%s: %v", p, err)
	case errors.Is(err, inroot.ErrTooMany), errors.Is(err, inroot.ErrNoSpace), errors.Is(err, errdefs.ErrLimit):
		return errdefs.Errorf(errdefs.ErrLimit, "%s: %v", p, err)
	case errors.Is(err, os.ErrPermission):
		return errdefs.Errorf(errdefs.ErrDenied, "%s: permission denied", p)
	case errors.Is(err, node.ErrGone):
		return errEnded
	}
	return fmt.Errorf("%s: the file operation failed", p)
}

// e2bFS serves a filesystem call: the request's JSON into req, fn's
// answer, inside the session's workspace as its user.
func e2bFS[T any](d *Server, fn func(sb *e2bSandbox, req *T) (any, error)) http.HandlerFunc {
	return d.e2bUnary(func(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
		var req T
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
		}
		if !sb.s.Enter() {
			return nil, errEnded
		}
		defer sb.s.Leave()
		return fn(sb, &req)
	})
}

func (d *Server) e2bFSRoutes(mux *http.ServeMux) {
	type pathReq struct {
		Path  string `json:"path"`
		Depth *int   `json:"depth,omitempty"`
	}
	mux.HandleFunc("POST /filesystem.Filesystem/Stat", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		loc, err := sb.fsPath(req.Path)
		if err != nil {
			return nil, err
		}
		var info e2b.EntryInfo
		err = sb.inDir(loc.dir, func(ws *os.File, _ int, d *describer) error {
			e, err := inroot.Stat(ws, loc.rel)
			if err == nil {
				info = d.entry(ws, loc.dir, e)
			}
			return err
		})
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return map[string]any{"entry": info}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/ListDir", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		loc, err := sb.fsPath(req.Path)
		if err != nil {
			return nil, err
		}
		depth := 1
		if req.Depth != nil {
			depth = *req.Depth
		}
		if depth < 1 || depth > 64 {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "depth %d: want 1 to 64", depth)
		}
		var out []e2b.EntryInfo
		err = sb.inDir(loc.dir, func(ws *os.File, _ int, d *describer) error {
			es, err := inroot.ReadDir(ws, loc.rel, depth)
			if err != nil {
				return err
			}
			out = make([]e2b.EntryInfo, 0, len(es))
			for _, e := range es {
				out = append(out, d.entry(ws, loc.dir, e))
			}
			return nil
		})
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return map[string]any{"entries": out}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/MakeDir", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		loc, err := sb.fsPath(req.Path)
		if err != nil {
			return nil, err
		}
		if err := loc.writable(); err != nil {
			return nil, err
		}
		if loc.rel == "" {
			// One of the directories itself (a framework makes sure of
			// it first).
			return nil, e2bFSError(req.Path, fmt.Errorf("%w: a directory", inroot.ErrExists))
		}
		var info e2b.EntryInfo
		err = sb.inDir(loc.dir, func(ws *os.File, uid int, d *describer) error {
			made, err := inroot.Mkdir(ws, loc.rel, uid, uid)
			if err == nil && !made {
				return fmt.Errorf("%w: a directory", inroot.ErrExists)
			}
			if err != nil {
				return err
			}
			e, err := inroot.Stat(ws, loc.rel)
			if err == nil {
				info = d.entry(ws, loc.dir, e)
			}
			return err
		})
		if err != nil {
			return nil, e2bFSError(req.Path, err)
		}
		return map[string]any{"entry": info}, nil
	}))
	mux.HandleFunc("POST /filesystem.Filesystem/Remove", e2bFS(d, func(sb *e2bSandbox, req *pathReq) (any, error) {
		loc, err := sb.path(req.Path)
		if err != nil {
			return nil, err
		}
		if err := loc.writable(); err != nil {
			return nil, err
		}
		// Nothing there is no error: envd removes with os.RemoveAll, which
		// answers nil for a path that does not exist (a missing parent
		// too); a symlink in the way is still refused.
		err = sb.s.InDir(loc.dir, func(ws *os.File, _ int) error { return inroot.Remove(ws, loc.rel) })
		if err != nil && !errors.Is(err, inroot.ErrNotFound) {
			return nil, e2bFSError(req.Path, err)
		}
		return struct{}{}, nil
	}))
	type moveReq struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	mux.HandleFunc("POST /filesystem.Filesystem/WatchDir", d.e2bWatchDir)
	mux.HandleFunc("POST /filesystem.Filesystem/CreateWatcher", d.e2bUnary(d.e2bCreateWatcher))
	mux.HandleFunc("POST /filesystem.Filesystem/GetWatcherEvents", d.e2bUnary(d.e2bWatcherEvents))
	mux.HandleFunc("POST /filesystem.Filesystem/RemoveWatcher", d.e2bUnary(d.e2bRemoveWatcher))
	mux.HandleFunc("POST /filesystem.Filesystem/Move", e2bFS(d, func(sb *e2bSandbox, req *moveReq) (any, error) {
		from, err := sb.path(req.Source)
		if err != nil {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "source: %v", err)
		}
		to, err := sb.path(req.Destination)
		if err != nil {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "destination: %v", err)
		}
		if err := cmp.Or(from.writable(), to.writable()); err != nil {
			return nil, err
		}
		if from.dir != to.dir {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "%s and %s are in different directories of the sandbox (%s and %s): a move stays within one",
				node.Shorten(req.Source), node.Shorten(req.Destination), from.dir, to.dir)
		}
		var info e2b.EntryInfo
		err = sb.inDir(from.dir, func(ws *os.File, _ int, d *describer) error {
			if err := inroot.Rename(ws, from.rel, to.rel); err != nil {
				return err
			}
			e, err := inroot.Stat(ws, to.rel)
			if err == nil {
				info = d.entry(ws, to.dir, e)
			}
			return err
		})
		if err != nil {
			return nil, e2bFSError(req.Source, err)
		}
		return map[string]any{"entry": info}, nil
	}))
}
