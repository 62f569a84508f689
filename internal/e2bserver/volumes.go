package e2bserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/internal/volume"
)

// E2B's team volumes are the node's volumes (node.CreateVolume and its
// kin) of the API key's token, translated: each its key's only, of the
// node's default size (E2B's create names none), attached writable
// where a create's volumeMounts say. E2B's volume content API (reading
// and writing a volume's files without a sandbox) is not served: a
// volume's files are reached from a sandbox it is mounted in.

// maxMounts bounds a create's volumeMounts, as the node bounds a
// session's volumes.
const maxMounts = 8

// errNoContentAPI answers every call of E2B's volume content API.
var errNoContentAPI = errdefs.Errorf(errUnsupported, "E2B's volume content API (a Volume's list, readFile, writeFile, makeDir, getInfo, exists, updateMetadata, remove) is not served by airlock: mount the volume in a sandbox (Sandbox.create with volumeMounts) and use that sandbox's files and commands (docs/e2b.md, Volumes)")

// e2bVolumeRoutes serves the volume calls; api is e2bRoutes' wrapper of
// a control-plane call.
func (d *Server) e2bVolumeRoutes(mux *http.ServeMux, api func(func(http.ResponseWriter, *http.Request, *node.Caller) error) http.HandlerFunc) {
	mux.HandleFunc("POST /volumes", api(d.e2bCreateVolume))
	mux.HandleFunc("GET /volumes", api(d.e2bListVolumes))
	mux.HandleFunc("GET /volumes/{id}", api(d.e2bGetVolume))
	mux.HandleFunc("DELETE /volumes/{id}", api(d.e2bDeleteVolume))
	// The content API's calls carry the volume's token, not an API key,
	// and every one is refused by name: a bare 404 would read as a
	// missing file (the SDKs' VolumePathNotFoundError).
	mux.HandleFunc("/volumecontent/", answer(func(http.ResponseWriter, *http.Request) error { return errNoContentAPI }))
}

func (d *Server) e2bCreateVolume(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req e2b.NewVolume
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	m, err := d.CreateVolume(r.Context(), c, edge.ClientOf(r), req.Name, 0)
	if err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusCreated, volumeAndToken(m))
	return nil
}

func (d *Server) e2bListVolumes(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	ms, err := d.Volumes(c)
	if err != nil {
		return err
	}
	out := make([]e2b.Volume, 0, len(ms))
	for _, m := range ms {
		out = append(out, e2b.Volume{VolumeID: m.ID, Name: m.Name})
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (d *Server) e2bGetVolume(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, err := d.FindVolume(c, r.PathValue("id"))
	if err != nil {
		return volumeError(r.PathValue("id"), err)
	}
	edge.WriteJSON(w, http.StatusOK, volumeAndToken(m))
	return nil
}

// e2bDeleteVolume deletes the key's volume; one attached to a sandbox
// (running or paused) is refused, 409.
func (d *Server) e2bDeleteVolume(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	if err := d.DeleteVolume(c, r.PathValue("id"), edge.ClientOf(r)); err != nil {
		if errors.Is(err, volume.ErrInUse) {
			return errdefs.Errorf(errdefs.ErrConflict, "volume %q is mounted in a sandbox; kill the sandbox first", node.Shorten(r.PathValue("id")))
		}
		return volumeError(r.PathValue("id"), err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// volumeError words a lookup's not found for E2B: another key's volume
// and none at all look the same.
func volumeError(id string, err error) error {
	if errdefs.IsNotFound(err) {
		return errdefs.Errorf(errdefs.ErrNotFound, "volume %q not found", node.Shorten(id))
	}
	return err
}

// volumeAndToken is m as create and get answer it, with a token for the
// content API. Airlock serves no content API, so the token is random,
// fresh on each answer and checked by nothing: it can never open
// anything, and a leaked one is worthless.
func volumeAndToken(m volume.Meta) e2b.VolumeAndToken {
	var b [24]byte
	rand.Read(b[:])
	return e2b.VolumeAndToken{VolumeID: m.ID, Name: m.Name, Token: "unserved_" + hex.EncodeToString(b[:])}
}

// e2bMounts reads a create's volumeMounts: each a volume of c's, by name
// (or id), at a place airlock does not build. The node checks them all
// again as it attaches them; these checks word the refusals for E2B's
// callers, whose volumes often go in /home/user.
func (d *Server) e2bMounts(vms []e2b.VolumeMount, c *node.Caller) ([]node.VolumeMount, error) {
	if len(vms) > maxMounts {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "volumeMounts: %d volumes; a sandbox has at most %d", len(vms), maxMounts)
	}
	var out []node.VolumeMount
	seen := map[string]bool{}
	for _, vm := range vms {
		if vm.Name == "" {
			return nil, errdefs.New(errdefs.ErrInvalid, "volumeMounts: a mount names no volume")
		}
		if len(vm.Path) > 4095 {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "volumeMounts: volume %q: the path is over 4095 bytes", node.Shorten(vm.Name))
		}
		// A volume never lands in or over what airlock builds (the
		// workspace, /tmp, /etc, /home...): there it could hide or
		// replace the sandbox's own files, or a path the host's file
		// calls trust.
		if err := sbspec.CheckTarget(vm.Path); err != nil {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "volumeMounts: volume %q: %v (docs/e2b.md, Volumes)", node.Shorten(vm.Name), err)
		}
		if seen[vm.Path] {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "volumeMounts: two volumes at %q", node.Shorten(vm.Path))
		}
		seen[vm.Path] = true
		if _, err := d.FindVolume(c, vm.Name); err != nil {
			if errdefs.IsNotFound(err) {
				return nil, errdefs.Errorf(errdefs.ErrNotFound, "volumeMounts: volume %q not found (Volume.create makes one)", node.Shorten(vm.Name))
			}
			return nil, err
		}
		out = append(out, node.VolumeMount{Volume: vm.Name, Path: vm.Path})
	}
	return out, nil
}
