package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/templates"
	"github.com/airlockhq/airlock/internal/tokens"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// fakeCore is a node for the E2B API's protocol tests: no sandbox, no
// root. A session it is asked to open is open's answer.
type fakeCore struct {
	counts node.Counters
	open   func(t *config.Tool, c *node.Caller, life time.Duration) error
	// snaps are the node's snapshots; a session asked of one is
	// openSnap's answer.
	snaps    []snapshot.Meta
	openSnap func(m snapshot.Meta, c *node.Caller, life time.Duration) error
	// vols are the node's volumes; a session asked with some is
	// openVols' answer.
	vols     []volume.Meta
	openVols func(t *config.Tool, c *node.Caller, mounts []node.VolumeMount) error
}

var _ Core = (*fakeCore)(nil)
var _ edge.Core = (*fakeCore)(nil)

func (f *fakeCore) Tools() *config.Config  { return nil }
func (f *fakeCore) Audit() *audit.Log      { return nil }
func (f *fakeCore) Counts() *node.Counters { return &f.counts }
func (f *fakeCore) Authorize(c *node.Caller, tool string) error {
	if !c.Allows(tool) {
		return node.ErrNoCaller
	}
	return nil
}
func (f *fakeCore) Exec(context.Context, *node.Session, string, sandbox.ExecRequest) (*result.Result, error) {
	return nil, node.ErrGone
}
func (f *fakeCore) Pause(context.Context, *node.Session, string, string) error {
	return errors.New("not in this fake")
}
func (f *fakeCore) Resume(context.Context, *node.Session, string, string, time.Duration) (bool, error) {
	return false, errors.New("not in this fake")
}
func (f *fakeCore) ResumeFromFiles(context.Context, *node.Session, string, string, time.Duration) (bool, bool, error) {
	return false, false, errors.New("not in this fake")
}
func (f *fakeCore) OpenSession(_ context.Context, t *config.Tool, _ string, c *node.Caller, _, life time.Duration, _ *attach.Policy) (*node.Session, error) {
	return nil, f.open(t, c, life)
}
func (f *fakeCore) OpenSessionWith(ctx context.Context, t *config.Tool, client string, c *node.Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []node.VolumeMount) (*node.Session, error) {
	if len(mounts) == 0 {
		return f.OpenSession(ctx, t, client, c, idle, life, narrowed)
	}
	return nil, f.openVols(t, c, mounts)
}
func (f *fakeCore) CreateVolume(_ context.Context, c *node.Caller, _, name string, size int64) (volume.Meta, error) {
	m := volume.Meta{ID: "vol_" + name, Name: name, Owner: c.Name, Size: size}
	f.vols = append(f.vols, m)
	return m, nil
}
func (f *fakeCore) Volumes(c *node.Caller) ([]volume.Meta, error) {
	var out []volume.Meta
	for _, m := range f.vols {
		if c.Sees(m.Owner) {
			out = append(out, m)
		}
	}
	return out, nil
}
func (f *fakeCore) FindVolume(c *node.Caller, idOrName string) (volume.Meta, error) {
	for _, m := range f.vols {
		if c.Sees(m.Owner) && (m.ID == idOrName || m.Name == idOrName) {
			return m, nil
		}
	}
	return volume.Meta{}, volume.ErrNotFound
}
func (f *fakeCore) DeleteVolume(c *node.Caller, idOrName, _ string) error {
	_, err := f.FindVolume(c, idOrName)
	return err
}
func (f *fakeCore) Fork(context.Context, *node.Session, *node.Caller, string, int, time.Duration) ([]node.Forked, error) {
	return nil, node.ErrGone
}
func (f *fakeCore) Snapshot(context.Context, *node.Session, *node.Caller, string, string) (snapshot.Meta, error) {
	return snapshot.Meta{}, node.ErrGone
}
func (f *fakeCore) Snapshots(c *node.Caller) ([]snapshot.Meta, error) {
	var out []snapshot.Meta
	for _, m := range f.snaps {
		if c.Sees(m.Owner) {
			out = append(out, m)
		}
	}
	return out, nil
}
func (f *fakeCore) FindSnapshot(c *node.Caller, idOrName string) (snapshot.Meta, error) {
	for _, m := range f.snaps {
		if c.Sees(m.Owner) && (m.ID == idOrName || m.Name == idOrName) {
			return m, nil
		}
	}
	return snapshot.Meta{}, snapshot.ErrNotFound
}
func (f *fakeCore) DeleteSnapshot(c *node.Caller, idOrName, _ string) error {
	_, err := f.FindSnapshot(c, idOrName)
	return err
}
func (f *fakeCore) OpenFromSnapshot(_ context.Context, m snapshot.Meta, _ string, c *node.Caller, _, life time.Duration, _ *attach.Policy, mounts []node.VolumeMount) (*node.Session, error) {
	if len(mounts) > 0 {
		return nil, f.openVols(nil, c, mounts)
	}
	return nil, f.openSnap(m, c, life)
}
func (f *fakeCore) Plan(string) attach.Plan                     { return attach.Plan{} }
func (f *fakeCore) RecordCode(string, *node.Session, node.Code) {}
func (f *fakeCore) RecordPort(string, *node.Session, node.Port) {}
func (f *fakeCore) SessionsOf(*node.Caller) []*node.Session     { return nil }
func (f *fakeCore) StartKernel(context.Context, *node.Session, string, string, string, []string) (*node.Kernel, error) {
	return nil, node.ErrGone
}

func (f *fakeCore) Templates() (*templates.Manager, error) {
	return nil, errors.New("no templates in the fake")
}
func (f *fakeCore) BuildSettings(*node.Caller, string) (templates.Settings, error) {
	return templates.Settings{}, errdefs.New(errdefs.ErrDenied, "no builds in the fake")
}
func (f *fakeCore) BuildTool() *config.Tool { return nil }
func (f *fakeCore) OpenFromImage(context.Context, *config.Tool, *image.Image, string, string, *node.Caller, time.Duration, time.Duration, *attach.Policy, []node.VolumeMount) (*node.Session, error) {
	return nil, node.ErrGone
}

const testKey = "e2b-test-key-0123456789"

// serveFake serves the E2B API over a fake core, with one API key, of a
// token scoped to tool sh.
func serveFake(t *testing.T, open func(t *config.Tool, c *node.Caller, life time.Duration) error) (*fakeCore, string) {
	t.Helper()
	t.Setenv("TEST_E2B_KEY", testKey)
	cfg, err := config.Parse("a.yaml", []byte(`
server:
  e2b: 127.0.0.1:7499
  tokens:
    - {name: ci, secret: key, tools: [sh]}
secrets:
  key: {env: TEST_E2B_KEY}
tools:
  sh: {}
  other: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokens.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCore{open: open}
	s := New(f, edge.NewGuard(f, toks, nil), Options{Config: cfg, StallTimeout: time.Second})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// TestCreateProtocol drives the E2B control plane's create through the
// edge alone: what the core is asked, and what the SDK's caller is
// answered ({code, message} and the status E2B's clients read) for a key
// missing, a template unknown or outside the key's scope, a timeout out
// of range, and the core's refusal. No sandbox is made, no root needed.
func TestCreateProtocol(t *testing.T) {
	var asked struct {
		tool string
		who  string
		life time.Duration
	}
	_, base := serveFake(t, func(tool *config.Tool, c *node.Caller, life time.Duration) error {
		asked.tool, asked.who, asked.life = tool.Name, c.Name, life
		return &node.Refusal{Kind: sandbox.ErrCapacity, RetryAfter: 1, Msg: "the node is at capacity: 3 sandboxes are live; try again shortly"}
	})
	for _, tt := range []struct {
		name, key, body string
		status          int
		says            string
	}{
		{"no key", "", `{"templateID":"sh"}`, 401, "a valid API key is required"},
		{"wrong key", "not-the-key-0123456789", `{"templateID":"sh"}`, 401, "a valid API key is required"},
		{"unknown template", testKey, `{"templateID":"nope"}`, 404, `no template "nope"`},
		{"out of scope", testKey, `{"templateID":"other"}`, 403, `may not use template "other"`},
		{"timeout", testKey, `{"templateID":"sh","timeout":0}`, 400, "timeout 0 s"},
		{"not JSON", testKey, `{"templateID":`, 400, "not valid JSON"},
		{"refused by the core", testKey, `{"templateID":"sh","timeout":60}`, 503, "at capacity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/sandboxes", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			if tt.key != "" {
				req.Header.Set("X-API-KEY", tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tt.status || e.Code != tt.status || !strings.Contains(e.Message, tt.says) {
				t.Errorf("got %d %s (%v), want %d saying %q", resp.StatusCode, b, err, tt.status, tt.says)
			}
			if ra := resp.Header.Get("Retry-After"); (tt.status == 503) != (ra == "1") {
				t.Errorf("Retry-After %q for a %d", ra, resp.StatusCode)
			}
		})
	}
	if asked.tool != "sh" || asked.who != "token:ci" || asked.life != time.Minute {
		t.Errorf("the core was asked for %+v", asked)
	}
}

// TestSnapshotProtocol drives create from a snapshot, the snapshots'
// list and their delete through the edge over a fake node: a key finds
// its own snapshots by id or name and never another's (whose id is
// answered as a template that is not there), tools keep precedence over
// a snapshot of the same name, and a snapshot of a tool outside the
// key's scope is refused as the tool is.
func TestSnapshotProtocol(t *testing.T) {
	var asked []string
	f, base := serveFake(t, func(tool *config.Tool, c *node.Caller, life time.Duration) error {
		asked = append(asked, "tool "+tool.Name)
		return &node.Refusal{Kind: sandbox.ErrCapacity, Msg: "at capacity"}
	})
	f.openSnap = func(m snapshot.Meta, c *node.Caller, life time.Duration) error {
		asked = append(asked, "snapshot "+m.ID+" as "+c.Name)
		return &node.Refusal{Kind: sandbox.ErrCapacity, Msg: "at capacity"}
	}
	now := time.Now()
	f.snaps = []snapshot.Meta{
		{ID: "snap_1", Name: "mine", Owner: "token:ci", Tool: "sh", Source: "s_a", Created: now},
		{ID: "snap_2", Owner: "token:ci", Tool: "sh", Source: "s_b", Created: now.Add(time.Second)},
		{ID: "snap_3", Name: "sh", Owner: "token:ci", Tool: "sh", Created: now.Add(2 * time.Second)},
		{ID: "snap_4", Owner: "token:ci", Tool: "other", Created: now.Add(3 * time.Second)},
		{ID: "snap_x", Name: "theirs", Owner: "token:someone", Tool: "sh", Created: now},
	}
	do := func(method, path, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, tt := range []struct {
		name, template string
		status         int
		says, asked    string
	}{
		{"by name", "mine", 503, "at capacity", "snapshot snap_1 as token:ci"},
		{"by id", "snap_2", 503, "at capacity", "snapshot snap_2 as token:ci"},
		{"a tool's name first", "sh", 503, "at capacity", "tool sh"},
		{"another key's id", "snap_x", 404, `no template "snap_x"`, ""},
		{"another key's name", "theirs", 404, `no template "theirs"`, ""},
		{"of a tool out of scope", "snap_4", 403, `may not use template "other"`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked = nil
			status, _, b := do("POST", "/v2/sandboxes", `{"templateID":"`+tt.template+`"}`)
			// The message is in the JSON body: its quotes escaped.
			if status != tt.status || !strings.Contains(b, strings.ReplaceAll(tt.says, `"`, `\"`)) {
				t.Errorf("got %d %s, want %d saying %q", status, b, tt.status, tt.says)
			}
			if got := strings.Join(asked, ","); got != tt.asked {
				t.Errorf("the core was asked %q, want %q", got, tt.asked)
			}
		})
	}
	for _, tt := range []struct {
		name, query, want string
		next              bool
	}{
		{"all of the key's", "", `[{"snapshotID":"mine","names":["mine"]},{"snapshotID":"snap_2","names":[]},{"snapshotID":"sh","names":["sh"]},{"snapshotID":"snap_4","names":[]}]`, false},
		{"by name", "?name=mine", `[{"snapshotID":"mine","names":["mine"]}]`, false},
		{"by id", "?name=snap_2", `[{"snapshotID":"snap_2","names":[]}]`, false},
		{"another's name", "?name=theirs", `[]`, false},
		{"by sandbox", "?sandboxID=s_b", `[{"snapshotID":"snap_2","names":[]}]`, false},
		{"a page", "?limit=1", `[{"snapshotID":"mine","names":["mine"]}]`, true},
	} {
		t.Run("list "+tt.name, func(t *testing.T) {
			status, h, b := do("GET", "/snapshots"+tt.query, "")
			if status != 200 || strings.TrimSpace(b) != tt.want || (h.Get("X-Next-Token") != "") != tt.next {
				t.Errorf("got %d %s (next %q), want %s", status, b, h.Get("X-Next-Token"), tt.want)
			}
		})
	}
	_, h, _ := do("GET", "/snapshots?limit=2", "")
	if status, _, b := do("GET", "/snapshots?limit=2&nextToken="+h.Get("X-Next-Token"), ""); status != 200 || strings.TrimSpace(b) != `[{"snapshotID":"sh","names":["sh"]},{"snapshotID":"snap_4","names":[]}]` {
		t.Errorf("the second page: %d %s", status, b)
	}
	for _, tt := range []struct {
		id     string
		status int
	}{{"mine", 204}, {"snap_2", 204}, {"snap_x", 404}, {"theirs", 404}, {"sh", 204}, {"nope", 404}} {
		if status, _, b := do("DELETE", "/templates/"+tt.id, ""); status != tt.status {
			t.Errorf("delete %s: got %d %s, want %d", tt.id, status, b, tt.status)
		}
	}
}
