package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLower checks from the host that lowering a sandbox's ceilings sets
// its cgroup's limits, and that raising any ceiling, or changing one fixed
// when the sandbox was built, is refused and changes nothing.
func TestLower(t *testing.T) {
	rt := testRuntime(t)
	l := DefaultLimits()
	l.Memory, l.Pids, l.Time = 64<<20, 64, 30*time.Second
	sb, err := rt.Create(t.Context(), Spec{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	limitFiles := func() map[string]string {
		got := map[string]string{}
		for _, dir := range cgroupDirs(sb.ID()) {
			for _, f := range []string{"memory.limit_in_bytes", "memory.max", "pids.max"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					got[f] = strings.TrimSpace(string(b))
				}
			}
		}
		return got
	}
	check := func(mem, pids string) {
		t.Helper()
		got := limitFiles()
		if len(got) == 0 {
			t.Fatal("no limit files found")
		}
		for f, v := range got {
			want := mem
			if f == "pids.max" {
				want = pids
			}
			if v != want {
				t.Errorf("%s is %s, want %s", f, v, want)
			}
		}
	}
	for _, tc := range []struct {
		name string
		set  func(*Limits)
	}{
		{"raise memory", func(l *Limits) { l.Memory = 128 << 20 }},
		{"raise pids", func(l *Limits) { l.Pids = 65 }},
		{"raise time", func(l *Limits) { l.Time = time.Minute }},
		{"raise output", func(l *Limits) { l.Output++ }},
		{"change disk", func(l *Limits) { l.Disk /= 2 }},
		{"change fds", func(l *Limits) { l.FDs = 128 }},
		{"under the minimum", func(l *Limits) { l.Memory = 1 << 20 }},
	} {
		w := l
		tc.set(&w)
		if err := sb.Lower(w); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want refused", tc.name, err)
		}
		check("67108864", "64")
	}
	// On v1 the sandbox's socket buffers have a ceiling of their own, its
	// share of the host's TCP memory, far below its memory ceiling:
	// lowering the memory must leave it as it is, never raise it to the
	// new memory ceiling.
	tcpLimit := func() string {
		for _, dir := range cgroupDirs(sb.ID()) {
			if b, err := os.ReadFile(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes")); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return ""
	}
	tcpBefore := tcpLimit()
	w := l
	w.Memory, w.Pids, w.Time = 32<<20, 16, time.Second
	if err := sb.Lower(w); err != nil {
		t.Fatal(err)
	}
	check("33554432", "16")
	if got := tcpLimit(); got != tcpBefore {
		t.Errorf("the socket buffer ceiling went from %s to %s", tcpBefore, got)
	}
	if got := sb.Limits(); got != w {
		t.Errorf("Limits() %+v, want %+v", got, w)
	}
	// Lowered once, it cannot be raised back.
	if err := sb.Lower(l); !errors.Is(err, ErrInvalid) {
		t.Errorf("raised back: %v", err)
	}
	check("33554432", "16")
}
