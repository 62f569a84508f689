package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/sbspec"
)

func TestParseImageSettings(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`images:
  store: /srv/images
  max_size: 2GiB
  max_entries: 5000
  max_pull: 3GiB
tools:
  py:
    image: python:3.12
    user: "1000:2000"
    rootfs: writable
  pinned:
    image: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    user: "0"
    rootfs: read-only
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Images, Images{Store: "/srv/images", MaxSize: 2 << 30, MaxEntries: 5000, MaxPull: 3 << 30}) {
		t.Errorf("images %+v", c.Images)
	}
	py, pinned := c.Tools["py"], c.Tools["pinned"]
	if py.Image != "python:3.12" || *py.User != (sbspec.User{UID: 1000, GID: 2000}) || !py.WritableRoot || py.WorkdirSet {
		t.Errorf("py %+v user %+v", py, py.User)
	}
	if *pinned.User != (sbspec.User{}) || pinned.WritableRoot {
		t.Errorf("pinned %+v", pinned)
	}
	d, err := Parse("a.yaml", []byte("tools:\n  t: {}\n"))
	if err != nil || d.Images.Store != "/var/lib/airlock/images" || d.Tools["t"].User != nil {
		t.Errorf("defaults: %+v %v", d.Images, err)
	}
}

func TestRegistries(t *testing.T) {
	t.Setenv("TEST_REG", "pw")
	c, err := Parse("a.yaml", []byte("secrets:\n  reg: {env: TEST_REG}\nimages:\n  registries:\n    127.0.0.1:5000: {username: u, secret: reg}\n    ghcr.io: {secret: reg}\n    reg.lan: {insecure: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Images.Registries["127.0.0.1:5000"]; r.Username != "u" || r.Secret != "reg" || c.Images.Registries["ghcr.io"].Secret != "reg" ||
		r.Insecure || !c.Images.Registries["reg.lan"].Insecure {
		t.Fatalf("registries %+v", c.Images.Registries)
	}
	for _, tt := range []struct{ in, want string }{
		{"images:\n  registries:\n    ghcr.io: {username: u}\n", "needs a secret"},
		{"images:\n  registries:\n    ghcr.io: {username: u, insecure: true}\n", "needs a secret"},
		{"images:\n  registries:\n    ghcr.io: {}\n", "or insecure: true"},
		{"images:\n  registries:\n    ghcr.io: {insecure: false}\n", "or insecure: true"},
		{"images:\n  registries:\n    ghcr.io: {insecure: yes please}\n", `images.registries["ghcr.io"].insecure: expected true or false`},
		{"images:\n  registries:\n    ghcr.io: {username: u, secret: nope}\n", `"nope"`},
		{"images:\n  registries:\n    ghcr.io/x: {secret: s}\nsecrets: {s: {env: X}}\n", "want a registry host"},
		{"images:\n  registries:\n    ghcr.io: {password: p, secret: s}\nsecrets: {s: {env: X}}\n", `unknown field "password"`},
	} {
		if _, err := Parse("a.yaml", []byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.in, err, tt.want)
		}
	}
}
