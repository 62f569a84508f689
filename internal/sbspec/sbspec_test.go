package sbspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultLimitsValid(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("DefaultLimits().Validate() = %v, want nil", err)
	}
	l := DefaultLimits()
	l.Pids, l.FDs = MinPids-1, MaxFDs+1
	err := l.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "pids:") || !strings.Contains(err.Error(), "\nfds:") {
		t.Fatalf("got %v, want the pids error, then the fds one", err)
	}
}

func TestMountCheck(t *testing.T) {
	dir, err := os.MkdirTemp("", "sbspec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		m    Mount
		want string
	}{
		{Mount{Source: dir, Target: "/srv/x"}, ""},
		{Mount{Source: dir, Target: "/"}, "the root is airlock's"},
		{Mount{Source: dir, Target: "/usr/local/x"}, "/usr is built by airlock"},
		{Mount{Source: dir, Target: "/srv/../etc"}, "absolute, clean"},
		{Mount{Source: link, Target: "/srv/x"}, "is a symlink"},
		{Mount{Source: "/nonexistent-airlock", Target: "/srv/x"}, "no such file"},
		{Mount{Source: t.TempDir(), Target: "/srv/x"}, "cannot be traversed by others"}, // t.TempDir's parent is 0700
	} {
		err := tt.m.Check()
		if got := err == nil; got != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.m, err, tt.want)
		}
	}
}
