package httpapi

import (
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/internal/volume"
)

// Volumes (docs/api.md): the node's (node.CreateVolume and its kin),
// translated.

func (d *Server) volumeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/volumes", methods(map[string]http.HandlerFunc{
		http.MethodGet:  d.listVolumes,
		http.MethodPost: d.postVolume,
	}))
	mux.HandleFunc("/v1/volumes/{id}", methods(map[string]http.HandlerFunc{
		http.MethodGet:    d.getVolume,
		http.MethodDelete: d.deleteVolume,
	}))
}

// VolumeView is the API form of m.
func VolumeView(m volume.Meta) api.Volume {
	return api.Volume{ID: m.ID, Name: m.Name, Size: m.Size, Created: m.Created.UTC().Format(time.RFC3339Nano)}
}

func (d *Server) postVolume(w http.ResponseWriter, r *http.Request) {
	var req api.VolumeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var size int64
	if req.Size != "" {
		var err error
		if size, err = units.ParseSize(req.Size); err != nil || size <= 0 {
			edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "size %q: want a size like 1GiB", node.Shorten(req.Size)))
			return
		}
	}
	m, err := d.CreateVolume(r.Context(), edge.CallerOf(r.Context()), edge.ClientOf(r), req.Name, size)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusCreated, VolumeView(m))
}

func (d *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	ms, err := d.Volumes(edge.CallerOf(r.Context()))
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	out := make([]api.Volume, 0, len(ms))
	for _, m := range ms {
		out = append(out, VolumeView(m))
	}
	edge.WriteJSON(w, http.StatusOK, out)
}

func (d *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	m, err := d.FindVolume(edge.CallerOf(r.Context()), r.PathValue("id"))
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, VolumeView(m))
}

func (d *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := d.DeleteVolume(edge.CallerOf(r.Context()), r.PathValue("id"), edge.ClientOf(r)); err != nil {
		edge.WriteErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeMounts translates a request's volumes.
func volumeMounts(vs []api.VolumeMount) []node.VolumeMount {
	var out []node.VolumeMount
	for _, v := range vs {
		out = append(out, node.VolumeMount{Volume: v.Volume, Path: v.Path})
	}
	return out
}
