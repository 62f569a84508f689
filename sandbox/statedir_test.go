package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckStateDir: a state directory below a directory the sandboxes'
// users cannot pass through (mktemp -d's 0700) is refused with the
// directory, its mode and the fix; one they can reach is taken.
func TestCheckStateDir(t *testing.T) {
	tests := []struct {
		name string
		// modes of base/a and base/a/b; the state dir is base/a/b/state.
		a, b os.FileMode
		link bool   // the state dir is reached through a symlink in base
		bad  string // the directory named, relative to base; "" if fine
	}{
		{"reachable", 0o755, 0o711, false, ""},
		{"parent 0700", 0o755, 0o700, false, "a/b"},
		{"grandparent 0700", 0o700, 0o755, false, "a"},
		{"through a symlink", 0o755, 0o700, true, "a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			// t.TempDir is 0700 itself, and so may be its parent.
			for p := base; p != "/"; p = filepath.Dir(p) {
				if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
					if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
						t.Skipf("cannot open %s to others: %v", p, err)
					}
				}
			}
			b := filepath.Join(base, "a", "b")
			if err := os.MkdirAll(b, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Join(base, "a"), tt.a)
			os.Chmod(b, tt.b)
			t.Cleanup(func() { os.Chmod(filepath.Join(base, "a"), 0o755); os.Chmod(b, 0o755) })
			state := filepath.Join(b, "state")
			if tt.link {
				if err := os.Symlink(b, filepath.Join(base, "l")); err != nil {
					t.Fatal(err)
				}
				state = filepath.Join(base, "l", "state")
			}
			err := CheckStateDir(state)
			if tt.bad == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			bad := filepath.Join(base, tt.bad)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "chmod o+x "+bad) || !strings.Contains(err.Error(), bad+" has mode 0700") {
				t.Fatalf("got %v, want ErrInvalid naming %s, its mode and chmod o+x", err, bad)
			}
		})
	}
}
