package cgroup

import (
	"strings"
	"testing"
)

// TestAncestorCeiling sets limits on two groups above a parent, and one on
// the parent itself: the lowest of the groups above counts, each limit
// where it is set, and the parent's own does not.
func TestAncestorCeiling(t *testing.T) {
	top := openTestParent(t)
	mid, err := Open(top.path + "/mid")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := Open(top.path + "/mid/parent")
	if err != nil {
		t.Fatal(err)
	}
	// Groups above the test's own may have limits of their own; the
	// test's groups have none yet.
	if c, err := AncestorCeiling(parent.path); err != nil || c.MemoryAt == top.path || c.MemoryAt == mid.path || c.PidsAt == top.path || c.PidsAt == mid.path {
		t.Fatalf("before any limit: %+v %v", c, err)
	}
	if err := top.SetCeiling(256<<20, 100); err != nil {
		t.Fatal(err)
	}
	if err := mid.SetCeiling(512<<20, 50); err != nil {
		t.Fatal(err)
	}
	if err := parent.SetCeiling(64<<20, 10); err != nil {
		t.Fatal(err)
	}
	c, err := AncestorCeiling(parent.path)
	if want := (Ceiling{MemoryBytes: 256 << 20, MemoryAt: top.path, Pids: 50, PidsAt: mid.path}); err != nil || c != want {
		t.Fatalf("AncestorCeiling = %+v %v, want %+v", c, err, want)
	}
	// A parent that does not exist yet is bounded by what is above it.
	if c2, err := AncestorCeiling(parent.path + "/not/yet"); err != nil || c2.MemoryBytes != 64<<20 || c2.Pids != 10 {
		t.Fatalf("below the parent: %+v %v", c2, err)
	}
	// Lifted, the limits bound nothing.
	for _, p := range []*Parent{top, mid} {
		if err := p.SetCeiling(-1, -1); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := AncestorCeiling(parent.path); err != nil || c.MemoryAt == top.path || c.MemoryAt == mid.path || c.PidsAt == top.path || c.PidsAt == mid.path {
		t.Fatalf("after lifting: %+v %v", c, err)
	}
	if _, err := AncestorCeiling("relative"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("a relative parent: %v", err)
	}
}
