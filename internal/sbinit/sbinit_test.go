package sbinit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/initproto"
	"golang.org/x/sys/unix"
)

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "data")
	if err := os.WriteFile(noexec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent:" + dir}
	tests := []struct {
		name    string
		want    string
		wantErr error
	}{
		{"tool", exe, nil},
		{"./rel/x", "./rel/x", nil},
		{"missing", "", unix.ENOENT},
		{"sub", "", unix.ENOENT},
	}
	for _, tt := range tests {
		got, err := lookPath(tt.name, env)
		if got != tt.want || err != tt.wantErr {
			t.Errorf("lookPath(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	if os.Geteuid() != 0 { // root may execute anything with an x bit only
		if _, err := lookPath("data", env); err != unix.EACCES {
			t.Errorf("lookPath(data) error %v, want EACCES", err)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := validate(&setupOK, nil); err != nil {
		t.Fatalf("valid setup refused: %v", err)
	}
	img := setupOK
	img.Image = &initproto.ImageRoot{}
	if err := validate(&img, []int{5}); err != nil {
		t.Fatalf("valid image setup refused: %v", err)
	}
	for name, tt := range map[string]struct {
		adjust func(*initproto.Setup)
		fds    []int
	}{
		"relative root":          {func(c *initproto.Setup) { c.RootDir = "relative" }, nil},
		"image without mount":    {func(c *initproto.Setup) { c.Image = &initproto.ImageRoot{} }, nil},
		"descriptor, no image":   {func(c *initproto.Setup) {}, []int{5}},
		"root with overlay sep":  {func(c *initproto.Setup) { c.Image = &initproto.ImageRoot{}; c.RootDir = "/run/a:b" }, []int{5}},
		"root with overlay sep2": {func(c *initproto.Setup) { c.Image = &initproto.ImageRoot{}; c.RootDir = "/run/a,upperdir=/x" }, []int{5}},
		// Init sharing the commands' uid could be signalled by them.
		"init uid is the commands'": {func(c *initproto.Setup) { c.InitUID = c.UID }, nil},
		"negative uid":              {func(c *initproto.Setup) { c.UID = -1 }, nil},
		"scratch inside the root":   {func(c *initproto.Setup) { c.ScratchDir = "/run/x/s" }, nil},
		"relative scratch":          {func(c *initproto.Setup) { c.ScratchDir = "s" }, nil},
	} {
		bad := setupOK
		tt.adjust(&bad)
		if validate(&bad, tt.fds) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

var setupOK = initproto.Setup{RootDir: "/run/x", ScratchDir: "/run/s", DiskBytes: 1 << 20, DiskInodes: 100, Workdir: "/workspace", UID: 1000, GID: 1000, InitUID: 65535}
