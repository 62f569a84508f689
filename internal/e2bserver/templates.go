package e2bserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/templates"
)

// E2B's template builds (the SDKs' Template.build; docs/e2b.md,
// docs/decisions/0034): a build requested, the COPY steps' files
// uploaded by hash to a link of its own, the steps started, the status
// polled with its log. A template is its API key's alone, a name for
// the image its build made, and a create naming it is a session of the
// config's builds.tool with that image.

// errOldBuild refuses the build calls of SDKs before the v3 API.
var errOldBuild = errdefs.New(errUnsupported, "this template build API is not served: airlock serves the Template SDK's (POST /v3/templates; JS e2b 2.x, Python e2b 2.x); a template is also a tool of the config, by its name or a name in its e2b_templates (docs/e2b.md)")

// errNoBuilds refuses a build where the config has no builds section.
// Refused by name, not with a bare 404, so that an integration that
// builds a template of its own when none is named (Mastra's E2BSandbox)
// says what to do instead.
var errNoBuilds = errdefs.New(errUnsupported, "airlock does not build templates here: this daemon's config has no builds section; name a tool as the template (by its name or a name in its e2b_templates), or add builds (docs/images.md)")

// e2bTemplateRoutes serves the build calls; api is e2bRoutes' wrapper
// of a control-plane call (a call without a valid API key is refused
// for that first).
func (d *Server) e2bTemplateRoutes(mux *http.ServeMux, api func(func(http.ResponseWriter, *http.Request, *node.Caller) error) http.HandlerFunc) {
	refuse := api(func(http.ResponseWriter, *http.Request, *node.Caller) error { return errOldBuild })
	for _, p := range []string{"POST /templates", "POST /v2/templates", "POST /templates/{id}"} {
		mux.HandleFunc(p, refuse)
	}
	mux.HandleFunc("POST /v3/templates", api(d.e2bRequestBuild))
	mux.HandleFunc("GET /templates/{id}/files/{hash}", api(d.e2bFileLink))
	mux.HandleFunc("POST /v2/templates/{id}/builds/{build}", api(d.e2bStartBuild))
	mux.HandleFunc("GET /templates/{id}/builds/{build}/status", api(d.e2bBuildStatus))
	// GET /templates/aliases/{alias} and GET /templates/{id}/tags
	// overlap (/templates/aliases/tags): one pattern, split here.
	mux.HandleFunc("GET /templates/{id}/{what}", api(func(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
		switch {
		case r.PathValue("id") == "aliases":
			return d.e2bAlias(w, r, c, r.PathValue("what"))
		case r.PathValue("what") == "tags":
			return d.e2bTags(w, r, c)
		}
		return errdefs.Errorf(errdefs.ErrNotFound, "no such call: GET %s", node.Shorten(r.URL.Path))
	}))
	mux.HandleFunc("POST /templates/tags", api(d.e2bAssignTags))
	mux.HandleFunc("DELETE /templates/tags", api(d.e2bRemoveTags))
	// The upload link: its secret is its credential (the SDK sends no
	// API key with it).
	mux.HandleFunc("PUT /templates/uploads/{secret}", answer(d.e2bUpload))
}

// e2bBuilder is the caller's template manager and build settings, or
// why it may not build.
func (d *Server) e2bBuilder(r *http.Request, c *node.Caller) (*templates.Manager, templates.Settings, error) {
	if cfg := d.Tools(); cfg == nil || cfg.Builds == nil {
		return nil, templates.Settings{}, errNoBuilds
	}
	s, err := d.BuildSettings(c, edge.ClientOf(r))
	if err != nil {
		d.Counts().Forbidden.Add(1)
		return nil, s, err
	}
	m, err := d.Templates()
	return m, s, err
}

type buildRequest struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      *int     `json:"cpuCount"`
	MemoryMB      *int     `json:"memoryMB"`
	MinFreeDiskMB *int     `json:"minFreeDiskMb"`
}

func (d *Server) e2bRequestBuild(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req buildRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	m, _, err := d.e2bBuilder(r, c)
	if err != nil {
		return err
	}
	tool := d.Tools().Builds.Tool
	switch {
	case req.CPUCount != nil, req.MemoryMB != nil, req.MinFreeDiskMB != nil:
		return errdefs.Errorf(errdefs.ErrInvalid, "cpuCount, memoryMB and minFreeDiskMb are not taken: a built template's sandboxes have the limits of tool %s (builds.tool in the config)", tool)
	case len(req.Tags) > 32:
		return errdefs.New(errdefs.ErrInvalid, "tags: at most 32")
	}
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	if name == "" {
		return errdefs.New(errdefs.ErrInvalid, "name: the template's name is required")
	}
	// A name a create would read as a tool's starts the tool instead.
	if base, _, _ := strings.Cut(name, ":"); d.Tools().E2BTemplate(base) != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "template name %q is a tool's of the config: a create naming it would start the tool; choose another", node.Shorten(base))
	}
	rq, err := m.Request(c.Name, name, req.Tags)
	if err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusAccepted, map[string]any{
		"templateID": rq.TemplateID, "buildID": rq.BuildID, "names": []string{rq.Name}, "aliases": []string{rq.Name},
		"tags": rq.Tags, "public": false,
	})
	return nil
}

func (d *Server) e2bFileLink(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, _, err := d.e2bBuilder(r, c)
	if err != nil {
		return err
	}
	present, secret, err := m.FileLink(c.Name, r.PathValue("id"), r.PathValue("hash"))
	if err != nil {
		return err
	}
	out := map[string]any{"present": present}
	if !present {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		out["url"] = scheme + "://" + r.Host + "/templates/uploads/" + secret
		out["headers"] = map[string]string{}
	}
	edge.WriteJSON(w, http.StatusCreated, out)
	return nil
}

func (d *Server) e2bUpload(w http.ResponseWriter, r *http.Request) error {
	cfg := d.Tools()
	if cfg == nil || cfg.Builds == nil {
		return errdefs.New(errdefs.ErrNotFound, "no such upload link")
	}
	b := cfg.Builds
	m, err := d.Templates()
	if err != nil {
		return err
	}
	if r.ContentLength > b.UploadMax {
		return errdefs.Errorf(errdefs.ErrLimit, "the upload is over builds.upload_max (%d bytes)", b.UploadMax)
	}
	if err := m.Upload(r.PathValue("secret"), r.Body, b.UploadMax); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (d *Server) e2bStartBuild(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var raw map[string]json.RawMessage
	if err := e2bDecode(r, &raw); err != nil {
		return err
	}
	m, s, err := d.e2bBuilder(r, c)
	if err != nil {
		return err
	}
	for _, k := range []string{"startCmd", "readyCmd"} {
		if v, ok := raw[k]; ok && asks(v) {
			return errdefs.Errorf(errdefs.ErrInvalid, "%s: airlock starts no process when a sandbox is created; run it with commands.run once it is (docs/e2b.md)", k)
		}
	}
	if v, ok := raw["fromImageRegistry"]; ok && asks(v) {
		return errdefs.New(errdefs.ErrInvalid, "fromImageRegistry: airlock builds from images in its own store; pull the image there (airlock image pull) and name it in fromImage")
	}
	b, _ := json.Marshal(raw)
	var spec templates.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "the body is not a template build: %v", err)
	}
	if (spec.FromImage == "") == (spec.FromTemplate == "") {
		return errdefs.New(errdefs.ErrInvalid, "exactly one of fromImage and fromTemplate is required")
	}
	if err := m.Start(c.Name, r.PathValue("id"), r.PathValue("build"), spec, s); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

type buildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

func logEntries(in []templates.LogEntry) []buildLogEntry {
	out := make([]buildLogEntry, 0, len(in))
	for _, e := range in {
		out = append(out, buildLogEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Step: e.Step})
	}
	return out
}

func (d *Server) e2bBuildStatus(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, _, err := d.e2bBuilder(r, c)
	if err != nil {
		return err
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return errdefs.New(errdefs.ErrInvalid, "logsOffset: want a whole number, 0 or more")
		}
	}
	id := r.PathValue("id")
	st, err := m.Status(c.Name, id, r.PathValue("build"), offset)
	if err != nil {
		return err
	}
	out := map[string]any{"templateID": id, "buildID": r.PathValue("build"), "status": st.Status, "logEntries": logEntries(st.Logs), "logs": []string{}}
	if st.Status == templates.StatusError {
		reason := map[string]any{"message": st.Reason, "logEntries": logEntries(st.Tail)}
		if st.FailedStep != "" {
			reason["step"] = st.FailedStep
		}
		out["reason"] = reason
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}

// e2bAlias says whether the caller has a template of that name (the
// SDKs' Template.exists).
func (d *Server) e2bAlias(w http.ResponseWriter, r *http.Request, c *node.Caller, alias string) error {
	if t := d.Tools().E2BTemplate(alias); t != nil && c.Allows(t.Name) {
		edge.WriteJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
		return nil
	}
	m, err := d.Templates()
	if err != nil {
		return err
	}
	t, ok := m.Get(c.Name, alias)
	if !ok {
		return errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", node.Shorten(alias))
	}
	edge.WriteJSON(w, http.StatusOK, map[string]any{"templateID": t.ID, "public": false})
	return nil
}

// builtTemplate is the tool built templates run as, when the caller
// has a built template ref (ok).
func (d *Server) builtTemplate(ref string, c *node.Caller) (*config.Tool, bool, error) {
	t := d.BuildTool()
	if t == nil {
		return nil, false, nil
	}
	m, err := d.Templates()
	if err != nil {
		return nil, false, err
	}
	_, ok := m.Get(c.Name, ref)
	return t, ok, nil
}

// findBuilt is the image of the caller's built template ref.
func (d *Server) findBuilt(ref string, c *node.Caller) (*templates.Template, *image.Image, error) {
	m, err := d.Templates()
	if err != nil {
		return nil, nil, err
	}
	return m.Find(c.Name, ref)
}

// tagsRequest is the body of the tag calls: assign's target and tags,
// remove's name and tags.
type tagsRequest struct {
	Target string   `json:"target"`
	Name   string   `json:"name"`
	Tags   []string `json:"tags"`
}

// tagsCall reads a tag call's body and finds the caller's builder.
func (d *Server) tagsCall(r *http.Request, c *node.Caller) (*templates.Manager, tagsRequest, error) {
	var req tagsRequest
	if err := e2bDecode(r, &req); err != nil {
		return nil, req, err
	}
	m, _, err := d.e2bBuilder(r, c)
	return m, req, err
}

// e2bAssignTags points tags at the build a "name:tag" points at (the
// SDKs' Template.assignTags).
func (d *Server) e2bAssignTags(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, req, err := d.tagsCall(r, c)
	if err != nil {
		return err
	}
	build, err := m.AssignTags(c.Name, req.Target, req.Tags)
	if err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusCreated, map[string]any{"buildID": build, "tags": req.Tags})
	return nil
}

// e2bRemoveTags removes tags of a template (Template.removeTags).
func (d *Server) e2bRemoveTags(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, req, err := d.tagsCall(r, c)
	if err != nil {
		return err
	}
	if err := m.RemoveTags(c.Name, req.Name, req.Tags); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// e2bTags lists a template's tags (Template.getTags).
func (d *Server) e2bTags(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	m, _, err := d.e2bBuilder(r, c)
	if err != nil {
		return err
	}
	tags, err := m.Tags(c.Name, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(tags))
	for _, t := range tags {
		out = append(out, map[string]any{"tag": t.Tag, "buildID": t.Build, "createdAt": t.At})
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}
