package e2bserver

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/snapshot"
)

// E2B's snapshots and forks, on the node's (node.Snapshot, node.Fork;
// docs/decisions/0028): a snapshot holds a sandbox's files, its
// workspace and /tmp, never its processes or memory, and is its API
// key's alone; a create whose templateID names one fills a fresh
// sandbox of its tool with them. A fork is such sandboxes made from a
// snapshot of a running one taken for them, and deleted once they are.
//
// An E2B snapshot is a template, named "namespace/alias:tag" by the
// team's slug. airlock has no teams and no tags: a key's snapshots are
// its own namespace, and a snapshot is never rebuilt. So a snapshot's
// snapshotID is its name when it has one (which is unique among its
// key's), else its id ("snap_…"); create, list's name filter and delete
// take either.

// e2bForkTimeout is a fork's life when the request names none, as E2B's.
const e2bForkTimeout = 15 * time.Second

// errFullSnapshot refuses a snapshot that asks for the processes too.
var errFullSnapshot = errdefs.New(errUnsupported, "memory: true asks for a snapshot of the sandbox's processes and memory; airlock's snapshots hold its files (the workspace and /tmp) only: leave memory out, or ask for mode \"filesystem\" (docs/e2b.md)")

// snapshotInfo is m as E2B's SnapshotInfo.
func snapshotInfo(m snapshot.Meta) e2b.SnapshotInfo {
	if m.Name != "" {
		return e2b.SnapshotInfo{SnapshotID: m.Name, Names: []string{m.Name}}
	}
	return e2b.SnapshotInfo{SnapshotID: m.ID, Names: []string{}}
}

// e2bSnapshot takes a snapshot of the sandbox: paused for the capture
// (by the node), then running again as it was.
func (d *Server) e2bSnapshot(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req e2b.SnapshotRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	if req.Memory != nil && *req.Memory {
		return errFullSnapshot
	}
	// A name create would read as a template's gives back a snapshotID
	// that starts the template instead: refused while it is one.
	if req.Name != "" && d.tools().E2BTemplate(req.Name) != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "snapshot name %q is a template's: a create naming it would start the template", node.Shorten(req.Name))
	}
	m, err := d.Snapshot(r.Context(), sb.s, c, edge.ClientOf(r), req.Name)
	if err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusCreated, snapshotInfo(m))
	return nil
}

// e2bListSnapshots lists the key's snapshots, oldest first, those of a
// sandbox (sandboxID) or of an id or name (name) if asked, in pages as
// e2bList's.
func (d *Server) e2bListSnapshots(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	q := r.URL.Query()
	limit, err := listLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	after, err := parseListToken(q.Get("nextToken"))
	if err != nil {
		return err
	}
	ms, err := d.Snapshots(c)
	if err != nil {
		return err
	}
	// By creation and then id: a page goes on after the last one of the
	// one before, whatever was deleted in between.
	at := func(m snapshot.Meta, created int64, id string) int {
		return cmp.Or(cmp.Compare(m.Created.UnixNano(), created), strings.Compare(m.ID, id))
	}
	slices.SortFunc(ms, func(a, b snapshot.Meta) int { return at(a, b.Created.UnixNano(), b.ID) })
	sandbox, name := q.Get("sandboxID"), q.Get("name")
	out := []e2b.SnapshotInfo{}
	var last snapshot.Meta
	for _, m := range ms {
		if after != nil && at(m, after.created, after.id) <= 0 {
			continue
		}
		if sandbox != "" && m.Source != sandbox || name != "" && m.ID != name && m.Name != name {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", snapshotToken(last))
			break
		}
		out = append(out, snapshotInfo(m))
		last = m
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}

// snapshotToken is the opaque x-next-token after m, of listToken's form.
func snapshotToken(m snapshot.Meta) string {
	return encodeListToken(m.Created.UnixNano(), m.ID)
}

// e2bDeleteSnapshot answers DELETE /templates/{id}, which the SDKs'
// deleteSnapshot calls: 204, or 404 (their false) when the key has no
// snapshot of that id or name. Templates, airlock's tools, are the
// config's, never deleted through the API.
func (d *Server) e2bDeleteSnapshot(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	id := r.PathValue("id")
	// A template the key built goes first (templates.go), then a
	// snapshot.
	if _, ok, err := d.builtTemplate(id, c); err != nil {
		return err
	} else if ok {
		m, err := d.Templates()
		if err == nil {
			err = m.Delete(c.Name, id)
		}
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err := d.DeleteSnapshot(c, id, edge.ClientOf(r)); err != nil {
		if errdefs.IsNotFound(err) {
			return errdefs.Errorf(errdefs.ErrNotFound, "no snapshot %q of this API key's, nor a template it built (templates that are airlock's tools are not deleted through the API)", node.Shorten(id))
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// e2bFork makes count sandboxes from the sandbox's files as they are now
// (node.Fork): each an E2B sandbox of its own, with its own credentials,
// the source's metadata, envVars and lifecycle, and timeout as its life.
// Each fork succeeds or fails on its own, and says which in its entry.
func (d *Server) e2bFork(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req e2b.ForkRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	life, err := e2bTimeout(req.Timeout, e2bForkTimeout)
	if err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	fs, err := d.Fork(r.Context(), sb.s, c, edge.ClientOf(r), count, life)
	if err != nil {
		return err
	}
	out := make([]e2b.ForkResult, len(fs))
	for i, f := range fs {
		if f.Err != nil {
			out[i].Error = &e2b.APIError{Code: apiStatus(f.Err), Message: f.Err.Error()}
			continue
		}
		fb := d.register(r.Context(), f.Session, maps.Clone(sb.metadata), maps.Clone(sb.envVars))
		v := d.sandboxView(fb)
		out[i].Sandbox = &v
	}
	edge.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// listLimit reads a list's limit: 1 to e2bListMax, that when absent.
func listLimit(v string) (int, error) {
	if v == "" {
		return e2bListMax, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > e2bListMax {
		return 0, errdefs.Errorf(errdefs.ErrInvalid, "limit %q: want 1 to %d", node.Shorten(v), e2bListMax)
	}
	return n, nil
}
