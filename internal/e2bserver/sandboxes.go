package e2bserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
)

// The E2B lifecycle calls: create, connect, get, list, timeout, kill.

func (d *Server) e2bCreate(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	spec, err := d.createSpec(r, c)
	if err != nil {
		return err
	}
	// E2B's timeout ends the sandbox however busy it is: the session's
	// lifetime; its idle timeout is the longest allowed.
	var s *node.Session
	if spec.img != nil {
		s, err = d.OpenFromImage(r.Context(), spec.tool, spec.img, spec.template, edge.ClientOf(r), c, node.MaxLife, spec.life, spec.narrowed, spec.mounts)
	} else if spec.snap != nil {
		s, err = d.OpenFromSnapshot(r.Context(), *spec.snap, edge.ClientOf(r), c, node.MaxLife, spec.life, spec.narrowed, spec.mounts)
	} else {
		s, err = d.OpenSessionWith(r.Context(), spec.tool, edge.ClientOf(r), c, node.MaxLife, spec.life, spec.narrowed, spec.mounts)
	}
	if err != nil {
		return err
	}
	s.SetLifecycle(spec.lifecycle)
	sb := d.register(r.Context(), s, spec.metadata, spec.envVars)
	if len(spec.volumes) > 0 {
		sb.mu.Lock()
		sb.volumes = spec.volumes
		sb.mu.Unlock()
	}
	d.e2bAnswer(w, http.StatusCreated, sb)
	return nil
}

// createSpec is what a create asks for, read and checked: the tool, or
// the snapshot (of that tool) to fill its sandbox from, and what the
// sandbox is given.
type createSpec struct {
	tool *config.Tool
	snap *snapshot.Meta // nil: a sandbox of the tool's image alone
	// img is a built template's image (template its id), in place of
	// the tool's.
	img       *image.Image
	template  string
	life      time.Duration
	metadata  map[string]string
	envVars   map[string]string
	narrowed  *attach.Policy
	lifecycle node.Lifecycle
	// mounts are the volumes to attach; volumes the same, as E2B lists
	// them.
	mounts  []node.VolumeMount
	volumes []e2b.VolumeMount
}

// createSpec reads a create's body and checks it: options airlock does
// not honour, the template and the key's scope, the timeout, envVars,
// the network's narrowing, the lifecycle.
func (d *Server) createSpec(r *http.Request, c *node.Caller) (createSpec, error) {
	var spec createSpec
	var raw map[string]json.RawMessage
	if err := e2bDecode(r, &raw); err != nil {
		return spec, err
	}
	// In order, so that a request with several is refused for the same
	// one every time.
	for _, k := range slices.Sorted(maps.Keys(e2bRefused)) {
		if v, ok := raw[k]; ok && asks(v) {
			return spec, errdefs.New(errdefs.ErrInvalid, k+": "+e2bRefused[k])
		}
	}
	if n, ok := raw["network"]; ok && string(n) != "null" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(n, &fields); err != nil {
			return spec, errdefs.New(errdefs.ErrInvalid, "network: not an object")
		}
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			switch {
			case k == "allowOut" || k == "denyOut" || k == "rules":
			case k == "allowPublicTraffic" && string(fields[k]) == "false":
				// What airlock does for every sandbox: its ports
				// need its traffic access token.
			case k == "allowPublicTraffic":
				return spec, errdefs.New(errdefs.ErrInvalid, "network.allowPublicTraffic: a sandbox's ports are never public: each request needs its traffic access token (docs/e2b.md)")
			default:
				return spec, errdefs.Errorf(errdefs.ErrInvalid, "network.%s is not supported; network.allowOut narrows the tool's egress (docs/e2b.md)", node.Shorten(k))
			}
		}
		if r, ok := fields["rules"]; ok {
			// Strictly: a rule's field airlock does not know (a
			// workload identity, say) is refused, not dropped.
			var rules map[string][]e2b.NetworkRule
			dec := json.NewDecoder(bytes.NewReader(r))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rules); err != nil {
				return spec, errdefs.New(errdefs.ErrInvalid, "network.rules: "+httpx.DescribeJSON(err)+"; a rule is {\"transform\": {\"headers\": {...}}}")
			}
		}
	}
	b, _ := json.Marshal(raw)
	var req e2b.CreateRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return spec, errdefs.New(errdefs.ErrInvalid, "the body is not a sandbox request: "+httpx.DescribeJSON(err))
	}

	t, snap, built, err := d.e2bTemplate(req.TemplateID, c)
	if err != nil {
		return spec, err
	}
	if built {
		tpl, img, err := d.findBuilt(req.TemplateID, c)
		if err != nil {
			return spec, err
		}
		spec.template, spec.img = tpl.ID, img
	}
	if !c.Allows(t.Name) {
		d.Counts().Forbidden.Add(1)
		return spec, errdefs.Errorf(errdefs.ErrDenied, "%s may not use template %q", c.Name, t.Name)
	}
	life, err := e2bTimeout(req.Timeout, e2bDefaultTimeout)
	if err != nil {
		return spec, err
	}
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return spec, errdefs.Errorf(errdefs.ErrInvalid, "envVars: %q is not a variable name", node.Shorten(k))
		}
	}
	narrowed, err := d.e2bNarrow(t.Name, &req)
	if err != nil {
		return spec, err
	}
	lc, err := lifecycle(raw)
	if err != nil {
		return spec, err
	}
	mounts, err := d.e2bMounts(req.VolumeMounts, c)
	if err != nil {
		return spec, err
	}
	return createSpec{tool: t, snap: snap, img: spec.img, template: spec.template, life: life, metadata: req.Metadata, envVars: req.EnvVars, narrowed: narrowed, lifecycle: lc,
		mounts: mounts, volumes: req.VolumeMounts}, nil
}

// e2bTemplate is the tool a create's templateID names (by its name or
// one of its e2b_templates), or else c's built template of that id or
// name (built: of the builds' tool), or else the snapshot of c's of that
// id or name, with its tool. Tools come first: a snapshot whose name is
// also a template's (a tool added to the config after it was taken) is
// reached by its id. Another key's template or snapshot is not found,
// as a template that is not there: the answer never tells which exist.
func (d *Server) e2bTemplate(id string, c *node.Caller) (t *config.Tool, snap *snapshot.Meta, built bool, err error) {
	if id == "" {
		return nil, nil, false, errdefs.New(errdefs.ErrInvalid, "templateID names the airlock tool to run; it is required")
	}
	if t := d.tools().E2BTemplate(id); t != nil {
		return t, nil, false, nil
	}
	if t, ok, err := d.builtTemplate(id, c); err != nil || ok {
		return t, nil, ok, err
	}
	m, err := d.FindSnapshot(c, id)
	switch {
	case err == nil:
		t := d.tools().Tools[m.Tool]
		if t == nil {
			return nil, nil, false, errdefs.Errorf(errdefs.ErrNotFound, "snapshot %s is of tool %q, which this node no longer has", m.ID, node.Shorten(m.Tool))
		}
		return t, &m, false, nil
	case errdefs.IsNotFound(err):
		return nil, nil, false, errdefs.Errorf(errdefs.ErrNotFound, "no template %q: templates are airlock's tools, by name or by a name in their e2b_templates (%s), templates this API key built, or its snapshots", node.Shorten(id), strings.Join(d.templateNames(), ", "))
	default:
		return nil, nil, false, err
	}
}

// register enters session s in the edge's table as an E2B sandbox with
// credentials of its own (its envd access token and traffic access
// token), given metadata and envVars, and returns it.
func (d *Server) register(ctx context.Context, s *node.Session, metadata, envVars map[string]string) *e2bSandbox {
	var env []string
	for k, v := range envVars {
		env = append(env, k+"="+v)
	}
	var tok, traffic [24]byte
	rand.Read(tok[:])
	rand.Read(traffic[:])
	sb := &e2bSandbox{s: s, token: hex.EncodeToString(tok[:]), traffic: hex.EncodeToString(traffic[:]), metadata: metadata, envVars: envVars, env: env,
		limits: d.Plan(s.Tool().Name).Spec.Limits, procs: map[uint32]*e2bProc{}}
	// Before any call can find it: its default contexts are those whose
	// kernels started ahead.
	sb.adoptKernels(ctx, envVars)
	s.SetEdgeState(edgeStateOf(metadata, envVars))
	d.e2b.mu.Lock()
	defer d.e2b.mu.Unlock()
	if d.e2b.m == nil {
		d.e2b.m = map[string]*e2bSandbox{}
	}
	// The sandboxes that have ended leave the table: their sessions
	// answer for a while longer, these never again.
	for id, old := range d.e2b.m {
		if old.s.View().State == api.SessionEnded {
			delete(d.e2b.m, id)
		}
	}
	d.e2b.m[s.ID()] = sb
	return sb
}

// templateNames are the names E2B clients may create sandboxes by: each
// tool's, then its e2b_templates.
func (d *Server) templateNames() []string {
	var names []string
	for _, n := range d.tools().Order {
		names = append(names, n)
		names = append(names, d.tools().Tools[n].E2BTemplates...)
	}
	return names
}

// asks says whether a create option's value asks for something: not
// null, false, an empty object or list, or {"enabled": false} (what the
// JS SDK before 2.50 sends as autoResume when nothing was asked).
func asks(v json.RawMessage) bool {
	switch strings.TrimSpace(string(v)) {
	case "null", "false", "{}", "[]":
		return false
	}
	var off struct {
		Enabled *bool `json:"enabled"`
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(v, &fields) == nil && len(fields) == 1 && json.Unmarshal(v, &off) == nil && off.Enabled != nil && !*off.Enabled {
		return false
	}
	return true
}

// e2bNarrow is the policy of a sandbox whose create narrowed the tool's
// egress, or nil when it did not. As E2B's: allow_internet_access false,
// or network.denyOut [ALL_TRAFFIC] alone, takes every destination (and
// the broker's services) away; denyOut [ALL_TRAFFIC] with allowOut keeps
// the destinations allowOut names, each of which must lie within the
// tool's; allowOut alone takes nothing away (on E2B it makes exceptions
// to denyOut), but an entry beyond the tool's egress is still refused,
// never applied: the operator's config is the ceiling. A denyOut of
// anything but all traffic is refused: the tool's egress denies
// everything it does not name already.
func (d *Server) e2bNarrow(tool string, req *e2b.CreateRequest) (*attach.Policy, error) {
	noNet := req.AllowInternetAccess != nil && !*req.AllowInternetAccess
	if req.Network == nil && !noNet {
		return nil, nil
	}
	pol := d.Plan(tool).Policy
	var rules map[string][]e2b.NetworkRule
	if req.Network != nil {
		rules = req.Network.Rules
	}
	if noNet {
		if len(rules) > 0 {
			return nil, errdefs.New(errdefs.ErrInvalid, "network.rules: allow_internet_access false takes the network away, and with it every host a rule could name")
		}
		pol.Egress, pol.Services = nil, nil
		return &pol, nil
	}
	services, err := e2bRules(pol.Services, rules)
	if err != nil {
		return nil, err
	}
	denyAll := false
	for _, e := range req.Network.DenyOut {
		if e != e2b.AllTraffic {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.denyOut: %q: only all traffic (%s) may be denied: the tool's egress denies whatever it does not name; name what the sandbox may reach in network.allowOut", node.Shorten(e), e2b.AllTraffic)
		}
		denyAll = true
	}
	if len(req.Network.AllowOut) > 256 {
		return nil, errdefs.New(errdefs.ErrInvalid, "network.allowOut: at most 256 destinations")
	}
	eg, err := policy.Narrow(pol.Egress, req.Network.AllowOut)
	if err != nil {
		// Whatever policy's class, a destination refused is a bad request.
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.allowOut: %v", err)
	}
	if !denyAll {
		if len(rules) == 0 {
			return nil, nil
		}
		pol.Services = services
		return &pol, nil
	}
	if len(req.Network.AllowOut) == 0 {
		if len(rules) > 0 {
			return nil, errdefs.New(errdefs.ErrInvalid, "network.rules: denyOut of all traffic with no allowOut takes every destination and the broker's services away, and with them every host a rule could name")
		}
		pol.Egress, pol.Services = nil, nil
		return &pol, nil
	}
	pol.Egress, pol.Services = eg, services
	return &pol, nil
}

func (d *Server) e2bAnswer(w http.ResponseWriter, status int, sb *e2bSandbox) {
	edge.WriteJSON(w, status, d.sandboxView(sb))
}

// sandboxView is sb as create, connect and fork answer it.
func (d *Server) sandboxView(sb *e2bSandbox) e2b.Sandbox {
	a := e2b.Sandbox{SandboxID: sb.s.ID(), TemplateID: sb.s.Tool().Name, ClientID: "airlock", Alias: sb.s.Tool().Name,
		EnvdVersion: e2b.EnvdVersion, EnvdAccessToken: sb.token, TrafficAccessToken: &sb.traffic}
	if d.opts.Domain != "" {
		// getHost(port) names the sandbox's ports under it.
		a.Domain = &d.opts.Domain
	}
	return a
}

// e2bFind is the caller's live E2B sandbox id, or nil: another key's, an
// ended one and none at all look the same.
func (d *Server) e2bFind(id string, c *node.Caller) *e2bSandbox {
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil || (c != nil && c.Name != sb.s.Owner()) || sb.s.View().State == api.SessionEnded {
		return nil
	}
	return sb
}

// e2bLookup is e2bFind of the call's {id}, or its refusal.
func (d *Server) e2bLookup(r *http.Request, c *node.Caller) (*e2bSandbox, error) {
	sb := d.e2bFind(r.PathValue("id"), c)
	if sb == nil {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q not found", node.Shorten(r.PathValue("id")))
	}
	return sb, nil
}

func (sb *e2bSandbox) detail() e2b.Detail {
	sb.mu.Lock()
	vols := sb.volumes
	sb.mu.Unlock()
	v := sb.s.View()
	l := sb.limits
	state := "running"
	if v.State == api.SessionPaused {
		state = "paused"
	}
	return e2b.Detail{SandboxID: v.ID, TemplateID: v.Tool, Alias: v.Tool, ClientID: "airlock", StartedAt: v.Created, EndAt: v.Expires,
		EnvdVersion: e2b.EnvdVersion, State: state, CPUCount: max(1, int(l.CPUMilli+999)/1000), MemoryMB: l.Memory >> 20,
		DiskSizeMB: l.Disk >> 20, Metadata: sb.metadata, Lifecycle: e2bLifecycle(sb.s.Lifecycle()), VolumeMounts: vols}
}

func (d *Server) e2bGet(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	edge.WriteJSON(w, http.StatusOK, sb.detail())
	return nil
}

func (d *Server) e2bList(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	// metadata=k%3Dv&... as the SDK sends it: encoded twice over.
	want := map[string]string{}
	if m := r.URL.Query().Get("metadata"); m != "" {
		q, err := url.ParseQuery(m)
		if err != nil {
			return errdefs.Errorf(errdefs.ErrInvalid, "metadata: %v", err)
		}
		for k, vs := range q {
			k2, err1 := url.QueryUnescape(k)
			v2, err2 := url.QueryUnescape(vs[0])
			if err1 != nil || err2 != nil {
				return errdefs.New(errdefs.ErrInvalid, "metadata: not URL-encoded")
			}
			want[k2] = v2
		}
	}
	limit, err := listLimit(r.URL.Query().Get("limit"))
	if err != nil {
		return err
	}
	after, err := parseListToken(r.URL.Query().Get("nextToken"))
	if err != nil {
		return err
	}
	f, err := d.listFilter(r.URL.Query())
	if err != nil {
		return err
	}
	out := []e2b.Detail{}
	states, err := listStates(r.URL.Query()["state"])
	if err != nil {
		return err
	}
	// By creation and then id, newest first unless asked otherwise: a
	// page goes on after the last one of the one before, whatever ended
	// in between.
	ss := d.SessionsOf(c)
	slices.SortFunc(ss, func(a, b *node.Session) int {
		return f.dir * cmp.Or(cmp.Compare(a.Created().UnixNano(), b.Created().UnixNano()), strings.Compare(a.ID(), b.ID()))
	})
	var last *node.Session
	for _, s := range ss {
		if after != nil && f.dir*cmp.Or(cmp.Compare(s.Created().UnixNano(), after.created), strings.Compare(s.ID(), after.id)) <= 0 {
			continue
		}
		if f.none || s.Created().Before(f.since) || f.tool != "" && s.Tool().Name != f.tool {
			continue
		}
		sb := d.e2bFind(s.ID(), c)
		if sb == nil {
			continue
		}
		d := sb.detail()
		match := states[d.State]
		for k, v := range want {
			match = match && sb.metadata[k] == v
		}
		if !match {
			continue
		}
		if len(out) == limit {
			// More remain: the token names where this page stopped.
			w.Header().Set("X-Next-Token", listToken(last))
			break
		}
		out = append(out, d)
		last = s
	}
	edge.WriteJSON(w, http.StatusOK, out)
	return nil
}

// listStates reads a list's state filter, as the SDKs send it: repeated
// (JS), or comma-separated (Python); none is both states.
func listStates(vs []string) (map[string]bool, error) {
	states := map[string]bool{}
	for _, v := range vs {
		for st := range strings.SplitSeq(v, ",") {
			switch st {
			case "running", "paused":
				states[st] = true
			default:
				return nil, errdefs.Errorf(errdefs.ErrInvalid, "state %q: want running or paused", node.Shorten(st))
			}
		}
	}
	if len(states) == 0 {
		states["running"], states["paused"] = true, true
	}
	return states, nil
}

// listFilter is what GET /v2/sandboxes selects beside metadata and state,
// and its order.
type listFilter struct {
	dir   int       // 1 oldest first ("asc"), -1 newest first ("desc", E2B's default)
	since time.Time // startedAfter: created at or after it
	tool  string    // template: the tool, by its name or one of its e2b_templates
	none  bool      // template names no tool: nothing matches
}

func (d *Server) listFilter(q url.Values) (listFilter, error) {
	f := listFilter{dir: -1}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		f.dir = 1
	default:
		return f, errdefs.Errorf(errdefs.ErrInvalid, "order %q: want asc or desc", node.Shorten(o))
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, errdefs.Errorf(errdefs.ErrInvalid, "startedAfter %q is not an RFC 3339 time", node.Shorten(v))
		}
		f.since = t
	}
	if v := q.Get("template"); v != "" {
		if t := d.tools().E2BTemplate(v); t != nil {
			f.tool = t.Name
		} else {
			f.none = true
		}
	}
	return f, nil
}

func (d *Server) e2bKill(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	// As DELETE /v1/sessions/{id}: answered once the sandbox is gone
	// and the end recorded, or not at all if the caller went away.
	if sb.s.End(r.Context(), "deleted") != nil {
		return nil
	}
	if err := d.Audit().Append(r.Context()); err != nil {
		d.opts.Logger.Error("audit: a session's end could not be recorded", "session", sb.s.ID(), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Server) e2bSetTimeout(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req e2b.TimeoutRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	if req.Timeout == nil {
		return errdefs.New(errdefs.ErrInvalid, "timeout (seconds) is required")
	}
	life, err := e2bTimeout(req.Timeout, 0)
	if err != nil {
		return err
	}
	sb.s.SetLife(life)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// e2bConnect answers a sandbox's credentials: 200 for a running one,
// 201 for a paused one, which it resumes.
func (d *Server) e2bConnect(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var req connectRequest
	if err := e2bDecode(r, &req); err != nil {
		return err
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	life, reboot, err := connectLife(req)
	if err != nil {
		return err
	}
	var resumed bool
	if reboot {
		// onResume "reboot": a sandbox whose processes a restart of
		// airlock took resumes from its files; one paused in memory
		// resumes whole (its processes are there to keep).
		resumed, _, err = d.ResumeFromFiles(r.Context(), sb.s, edge.ClientOf(r), node.PauseAsked, max(life, e2bDefaultTimeout))
	} else {
		resumed, err = d.Resume(r.Context(), sb.s, edge.ClientOf(r), node.PauseAsked, max(life, e2bDefaultTimeout))
	}
	if err != nil {
		return err
	}
	if life > 0 {
		// As E2B's: connecting may lengthen a sandbox's life, never
		// shorten it (setTimeout does either).
		sb.s.ExtendLife(life)
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	d.e2bAnswer(w, status, sb)
	return nil
}

// e2bListMax is the most sandboxes one page of GET /v2/sandboxes holds
// (and its default), as E2B's.
const e2bListMax = 100

// listCursor is where a page of the list stopped.
type listCursor struct {
	created int64 // Unix nanoseconds (wall clock: tokens outlive the monotonic one)
	id      string
}

// listToken is the opaque x-next-token after s: its creation time and id.
func listToken(s *node.Session) string {
	return encodeListToken(s.Created().UnixNano(), s.ID())
}

// encodeListToken is the x-next-token after what was created at created
// (Unix nanoseconds) with id.
func encodeListToken(created int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created, 10) + "." + id))
}

func parseListToken(tok string) (*listCursor, error) {
	if tok == "" {
		return nil, nil
	}
	bad := errdefs.Errorf(errdefs.ErrInvalid, "nextToken %q is not one this airlock gave", node.Shorten(tok))
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(tok) > 128 {
		return nil, bad
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, bad
	}
	return &listCursor{created: n, id: id}, nil
}

// e2bMetric is one reading of GET /sandboxes/{id}/metrics.
type e2bMetric struct {
	Timestamp string `json:"timestamp"`
	// TimestampUnix is the same time in Unix seconds, which the Python
	// SDK requires.
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	// MemCache is the page cache's share of MemUsed, which the Python
	// SDK requires: 0, airlock's memory reading is the cgroup's charge.
	MemCache  int64 `json:"memCache"`
	DiskUsed  int64 `json:"diskUsed"`
	DiskTotal int64 `json:"diskTotal"`
}

// e2bMetrics answers with one reading taken now, from the host (E2B keeps
// a history; airlock reads the sandbox when asked): memory and disk in
// use against their ceilings, and the CPU used since the reading before
// (or since the sandbox's start) as a share of its CPUs. A start or end
// that leaves now out gives no reading.
func (d *Server) e2bMetrics(w http.ResponseWriter, r *http.Request, c *node.Caller) error {
	var bounds [2]int64
	for i, k := range []string{"start", "end"} {
		v := r.URL.Query().Get(k)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errdefs.Errorf(errdefs.ErrInvalid, "%s %q: want a Unix time in seconds", k, node.Shorten(v))
		}
		bounds[i] = n
	}
	sb, err := d.e2bLookup(r, c)
	if err != nil {
		return err
	}
	now := time.Now()
	if bounds[0] > now.Unix() || bounds[1] != 0 && bounds[1] < now.Unix() {
		edge.WriteJSON(w, http.StatusOK, []e2bMetric{})
		return nil
	}
	box := sb.s.Sandbox()
	if box == nil {
		// Dormant: no sandbox, nothing to read.
		edge.WriteJSON(w, http.StatusOK, []e2bMetric{})
		return nil
	}
	smp, err := box.Sample()
	if err != nil {
		return errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q has ended", sb.s.ID())
	}
	cpus := max(1, int(sb.limits.CPUMilli+999)/1000)
	sb.mu.Lock()
	since, cpuBefore := sb.metricAt, sb.metricCPU
	if since.IsZero() {
		since = sb.s.Created()
	}
	sb.metricAt, sb.metricCPU = now, smp.CPUMillis
	sb.mu.Unlock()
	pct := 0.0
	if wall := now.Sub(since).Milliseconds(); wall > 0 {
		pct = min(100, float64(smp.CPUMillis-cpuBefore)*100/float64(wall*int64(cpus)))
	}
	edge.WriteJSON(w, http.StatusOK, []e2bMetric{{
		Timestamp: now.UTC().Format(time.RFC3339Nano), TimestampUnix: now.Unix(), CPUCount: cpus, CPUUsedPct: math.Round(pct*100) / 100,
		MemUsed: smp.MemoryBytes, MemTotal: sb.limits.Memory, DiskUsed: smp.DiskBytes, DiskTotal: sb.limits.Disk,
	}})
	return nil
}
