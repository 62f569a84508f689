package httpapi

import (
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/snapshot"
)

// Snapshots and forks of sessions (docs/api.md): the node's
// (node.Snapshot, node.Fork), translated.

func (d *Server) snapshotRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sessions/{id}/snapshots", edge.Only(http.MethodPost, d.postSnapshot))
	mux.HandleFunc("/v1/sessions/{id}/fork", edge.Only(http.MethodPost, d.postFork))
	mux.HandleFunc("/v1/snapshots", edge.Only(http.MethodGet, d.listSnapshots))
	mux.HandleFunc("/v1/snapshots/{id}", methods(map[string]http.HandlerFunc{
		http.MethodGet:    d.getSnapshot,
		http.MethodDelete: d.deleteSnapshot,
	}))
}

// SnapshotView is the API form of m.
func SnapshotView(m snapshot.Meta) api.Snapshot {
	return api.Snapshot{ID: m.ID, Name: m.Name, Digest: m.Digest, Tool: m.Tool, Source: m.Source, Size: m.Size,
		Files: m.Files, Skipped: m.Skipped, Created: m.Created.UTC().Format(time.RFC3339Nano), Layered: m.Seeded}
}

func (d *Server) postSnapshot(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	var req api.SnapshotRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	m, err := d.Snapshot(r.Context(), s, edge.CallerOf(r.Context()), edge.ClientOf(r), req.Name)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusCreated, SnapshotView(m))
}

func (d *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	ms, err := d.Snapshots(edge.CallerOf(r.Context()))
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	out := make([]api.Snapshot, 0, len(ms))
	for _, m := range ms {
		out = append(out, SnapshotView(m))
	}
	edge.WriteJSON(w, http.StatusOK, out)
}

func (d *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	m, err := d.FindSnapshot(edge.CallerOf(r.Context()), r.PathValue("id"))
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, SnapshotView(m))
}

func (d *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := d.DeleteSnapshot(edge.CallerOf(r.Context()), r.PathValue("id"), edge.ClientOf(r)); err != nil {
		edge.WriteErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// openFromSnapshot answers POST /v1/sessions naming a snapshot.
func (d *Server) openFromSnapshot(w http.ResponseWriter, r *http.Request, req api.SessionRequest, idle, life time.Duration) {
	c := edge.CallerOf(r.Context())
	m, err := d.FindSnapshot(c, req.Snapshot)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	if req.Tool != "" && req.Tool != m.Tool {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "snapshot %s is of tool %q, not %q", m.ID, m.Tool, node.Shorten(req.Tool)))
		return
	}
	if d.ForbidTool(w, r, m.Tool) {
		return
	}
	s, err := d.OpenFromSnapshot(r.Context(), m, edge.ClientOf(r), c, idle, life, nil, volumeMounts(req.Volumes))
	if err != nil {
		if r.Context().Err() == nil {
			edge.WriteErr(w, err)
		}
		return
	}
	edge.WriteJSON(w, http.StatusCreated, s.View())
}

func (d *Server) postFork(w http.ResponseWriter, r *http.Request) {
	s := d.lookup(w, r)
	if s == nil {
		return
	}
	var req api.ForkRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	life, err := node.ParseBound(req.MaxLifetime, node.DefaultLife, node.MaxLife, "max_lifetime")
	if err != nil {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	fs, err := d.Fork(r.Context(), s, edge.CallerOf(r.Context()), edge.ClientOf(r), req.Count, life)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	out := make([]api.Forked, len(fs))
	for i, f := range fs {
		if f.Err != nil {
			_, code := edge.StatusOf(f.Err)
			out[i].Error = &api.Error{Code: code, Message: f.Err.Error()}
			continue
		}
		v := f.Session.View()
		out[i].Session = &v
	}
	edge.WriteJSON(w, http.StatusCreated, out)
}
