package config

import (
	"testing"

	"github.com/airlockhq/airlock/internal/sbspec"
)

func TestParseImageSettings(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`images:
  store: /srv/images
  max_size: 2GiB
  max_entries: 5000
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
	if c.Images != (Images{Store: "/srv/images", MaxSize: 2 << 30, MaxEntries: 5000}) {
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
