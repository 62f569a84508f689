package attach

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/sandbox"
)

// TestFor is the one translation of a tool, with and without an image and
// overrides, and its refusals.
func TestFor(t *testing.T) {
	t.Setenv("TEST_PLAN_SECRET", "0123456789abcdef")
	c, err := config.Parse("airlock.yaml", []byte(`
secrets:
  tok: {env: TEST_PLAN_SECRET}
services:
  gh:
    upstream: https://api.example.com
    credential: {secret: tok, template: "Bearer {secret}"}
    operations: [GET /x]
tools:
  plain:
    limits: {memory: 64MiB, time: 5s}
    env: {A: tool}
    egress: [pypi.org]
    network: {connections: 7}
    services: [gh]
  dir:
    workdir: /srv
    user: "1000:1000"
    image: some/image
    rootfs: writable
`))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := uint32(42), uint32(43)
	img := &image.Image{Digest: "sha256:abc", Root: "/images/abc", Lock: "/images/abc.lock", Config: image.Config{
		Env: []string{"PATH=/img/bin", "A=image"}, WorkingDir: "/app", UID: &uid, GID: &gid, Entrypoint: []string{"python3"}, Cmd: []string{"-V"},
	}}
	limits := func(mem int64) sandbox.Limits {
		l := sandbox.DefaultLimits()
		l.Memory, l.Time = mem, 5e9
		return l
	}
	extra, err := policy.ParseDestination("example.org")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool string
		o          Overrides
		check      func(t *testing.T, p Plan)
	}{
		{name: "a tool as written", tool: "plain", check: func(t *testing.T, p Plan) {
			if p.Spec.Limits != limits(64<<20) || p.Spec.Label != "plain" || p.Spec.Image != nil || p.Spec.User != nil {
				t.Errorf("spec %+v", p.Spec)
			}
			if !reflect.DeepEqual(p.Env, []string{"A=tool"}) || p.Workdir != config.DefaultWorkdir || p.Argv != nil {
				t.Errorf("env %q workdir %q argv %q", p.Env, p.Workdir, p.Argv)
			}
			if len(p.Policy.Egress) != 1 || p.Policy.Network.Connections != 7 || len(p.Policy.Services) != 1 || p.Policy.Services[0].Name != "gh" || p.Policy.Secrets["tok"] == nil || p.Policy.Tool != "plain" {
				t.Errorf("policy %+v", p.Policy)
			}
		}},
		{name: "overrides after the tool", tool: "plain", o: Overrides{
			Limits: func(l *sandbox.Limits) { l.Memory = 32 << 20 }, Egress: []policy.Destination{extra}, Env: []string{"A=flag"}, Workdir: "/tmp", WorkdirSet: true,
		}, check: func(t *testing.T, p Plan) {
			if p.Spec.Limits != limits(32<<20) || !reflect.DeepEqual(p.Env, []string{"A=tool", "A=flag"}) || p.Workdir != "/tmp" || len(p.Policy.Egress) != 2 {
				t.Errorf("plan %+v", p)
			}
		}},
		{name: "an image under the tool", tool: "plain", o: Overrides{Image: img}, check: func(t *testing.T, p Plan) {
			if p.Spec.Image == nil || p.Spec.Image.Root != img.Root || p.Spec.Image.Writable || *p.Spec.User != (sandbox.User{UID: 42, GID: 43}) {
				t.Errorf("spec %+v user %+v", p.Spec, p.Spec.User)
			}
			if !reflect.DeepEqual(p.Env, []string{"PATH=/img/bin", "A=image", "A=tool"}) || p.Workdir != "/app" || strings.Join(p.Argv, " ") != "python3 -V" || p.Digest != img.Digest {
				t.Errorf("env %q workdir %q argv %q digest %q", p.Env, p.Workdir, p.Argv, p.Digest)
			}
		}},
		{name: "the tool's workdir and user over the image's", tool: "dir", o: Overrides{Image: img}, check: func(t *testing.T, p Plan) {
			if p.Workdir != "/srv" || *p.Spec.User != (sandbox.User{UID: 1000, GID: 1000}) || !p.Spec.Image.Writable {
				t.Errorf("workdir %q user %+v image %+v", p.Workdir, p.Spec.User, p.Spec.Image)
			}
		}},
		{name: "an image without a workdir", tool: "plain", o: Overrides{Image: &image.Image{Root: "/r"}}, check: func(t *testing.T, p Plan) {
			if p.Workdir != config.DefaultWorkdir || p.Spec.User != nil {
				t.Errorf("workdir %q user %+v", p.Workdir, p.Spec.User)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, err := c.Tool(tt.tool)
			if err != nil {
				t.Fatal(err)
			}
			p, err := For(c, tool, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
	// The tool's own slices are never written through.
	tool, _ := c.Tool("plain")
	if _, err := For(c, tool, Overrides{Env: []string{"B=1"}, Egress: []policy.Destination{extra}}); err != nil || len(tool.Env) != 1 || len(tool.Egress) != 1 {
		t.Errorf("the tool changed: env %q egress %v (%v)", tool.Env, tool.Egress, err)
	}
	// A service the config does not have is an error, whoever asks (the
	// daemon once skipped it silently).
	ghost := &config.Tool{Name: "ghost", Services: []string{"nope"}}
	if _, err := For(c, ghost, Overrides{}); !errors.Is(err, config.ErrNotFound) || !strings.Contains(err.Error(), "tool ghost") {
		t.Errorf("a missing service: %v", err)
	}
	if _, err := For(nil, ghost, Overrides{}); err == nil {
		t.Error("a service with no config at all")
	}
	if p, err := For(nil, &config.Tool{}, Overrides{}); err != nil || p.Spec.Limits != sandbox.DefaultLimits() {
		t.Errorf("no tool at all: %+v %v", p, err)
	}
}
