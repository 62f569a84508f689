package e2bserver

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
)

// E2B's pause and resume, on the node's (node.Pause): a paused sandbox's
// processes are frozen in memory and stay its owner's; connect resumes
// it. What E2B also offers and airlock does not yet, a pause that keeps
// only the files (memory: false; onResume "reboot"), is refused by name.

// errMemoryless refuses a pause or resume that keeps only the files.
var errMemoryless = errdefs.New(errUnsupported, "a pause that keeps only the files (memory: false) is not supported: airlock pauses a sandbox in memory, its processes frozen (docs/e2b.md)")

// lifecycle reads create's autoPause, autoPauseMemory and autoResume.
func lifecycle(raw map[string]json.RawMessage) (node.Lifecycle, error) {
	var l node.Lifecycle
	var pause, memory *bool
	var resume *struct {
		Enabled *bool `json:"enabled"`
	}
	for k, v := range map[string]any{"autoPause": &pause, "autoPauseMemory": &memory, "autoResume": &resume} {
		if b, ok := raw[k]; ok {
			if err := json.Unmarshal(b, v); err != nil {
				return l, errdefs.Errorf(errdefs.ErrInvalid, "%s: not a valid value", k)
			}
		}
	}
	l.PauseOnTimeout = pause != nil && *pause
	if memory != nil && !*memory && l.PauseOnTimeout {
		return l, errdefs.New(errdefs.ErrInvalid, "autoPauseMemory: false asks for a pause that keeps only the files, which airlock does not do: it pauses a sandbox in memory, its processes frozen (docs/e2b.md)")
	}
	if resume != nil && resume.Enabled != nil && *resume.Enabled {
		if !l.PauseOnTimeout {
			return l, errdefs.New(errdefs.ErrInvalid, "autoResume: a sandbox resumes on traffic only when it pauses on timeout (autoPause)")
		}
		l.AutoResume = true
	}
	return l, nil
}

// pauseRequest is the body of POST /sandboxes/{id}/pause, and the part
// of connect's that concerns a paused sandbox.
type pauseRequest struct {
	// Memory false asks for a pause that keeps only the files.
	Memory *bool `json:"memory"`
}

func (d *Server) e2bPause(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req pauseRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	if req.Memory != nil && !*req.Memory {
		return errMemoryless
	}
	// A paused sandbox answers 409, which the SDKs read as "was
	// paused already" (pause returns false).
	if err := d.Pause(r.Context(), sb.s, edge.ClientOf(r), node.PauseAsked); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resumeRequest is the body of the deprecated POST /sandboxes/{id}/resume.
type resumeRequest struct {
	Timeout   *int  `json:"timeout"`
	AutoPause *bool `json:"autoPause"`
}

// e2bResume is the deprecated resume: 201 with the sandbox when it was
// paused, 409 when it was running.
func (d *Server) e2bResume(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req resumeRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	life, err := e2bTimeout(req.Timeout, e2bDefaultTimeout)
	if err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	resumed, err := d.Resume(r.Context(), sb.s, edge.ClientOf(r), node.PauseAsked, life)
	if err != nil {
		return err
	}
	if !resumed {
		return errdefs.Errorf(errdefs.ErrConflict, "sandbox %q is running already", node.Shorten(sb.s.ID()))
	}
	if req.AutoPause != nil {
		l := sb.s.Lifecycle()
		l.PauseOnTimeout = *req.AutoPause
		l.AutoResume = l.AutoResume && l.PauseOnTimeout
		sb.s.SetLifecycle(l)
	}
	d.e2bAnswer(w, http.StatusCreated, sb)
	return nil
}

// awake makes sure sb runs for a call to it (envd's, the interpreter's,
// a port's): a paused sandbox is resumed when its lifecycle says traffic
// resumes it (E2B's autoResume), else the call is refused, as E2B's proxy
// refuses traffic to a paused sandbox; an ended one was not found.
func (d *Server) awake(r *http.Request, sb *e2bSandbox) error {
	switch v := sb.s.View(); v.State {
	case api.SessionActive:
		return nil
	case api.SessionPaused:
		if sb.s.Dormant() {
			// As E2B's filesystem-only pause: no resume by traffic.
			return errdefs.Errorf(errEnded, "sandbox %q is paused with its files only (its processes did not survive a restart of airlock); connect with onResume \"reboot\" to resume it", node.Shorten(v.ID))
		}
		if !sb.s.Lifecycle().AutoResume {
			return errdefs.Errorf(errEnded, "sandbox %q is paused; connect resumes it", node.Shorten(v.ID))
		}
		_, err := d.Resume(r.Context(), sb.s, edge.ClientOf(r), node.PauseTraffic, e2bDefaultTimeout)
		return err
	default:
		return errdefs.Errorf(errEnded, "sandbox %q was not found: it has ended (%s)", node.Shorten(v.ID), v.EndReason)
	}
}

// e2bLifecycle is a sandbox's lifecycle as GET /sandboxes/{id} shows it.
func e2bLifecycle(l node.Lifecycle) *e2b.Lifecycle {
	out := &e2b.Lifecycle{OnTimeout: "kill", AutoResume: l.AutoResume}
	if l.PauseOnTimeout {
		out.OnTimeout = "pause"
	}
	return out
}

// connectLife is what a connect asks of a sandbox's life, and whether
// it asks for a resume from the files alone (onResume "reboot").
func connectLife(req connectRequest) (life time.Duration, reboot bool, err error) {
	reboot = req.Memory != nil && !*req.Memory
	if req.Timeout == nil {
		return 0, reboot, nil
	}
	life, err = e2bTimeout(req.Timeout, 0)
	return life, reboot, err
}

// connectRequest is the body of connect.
type connectRequest struct {
	Timeout *int  `json:"timeout,omitempty"` // seconds
	Memory  *bool `json:"memory,omitempty"`  // false: resume from the files only ("reboot")
}
