package cgroup

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nestProc starts sleep and moves it into the group nested at rel below g,
// in every hierarchy, making the nested directories first.
func nestProc(t *testing.T, g *Group, rel string) *exec.Cmd {
	t.Helper()
	for _, d := range g.dirs {
		if err := os.MkdirAll(filepath.Join(d, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, rel, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	return cmd
}

// TestNestedGroups covers what the package does over a whole subtree: the
// recursive listing, Kill reaching a process two levels down, Delete
// refusing to drop that process while it lives (the kernel's EBUSY) and
// then removing the nested groups deepest first.
func TestNestedGroups(t *testing.T) {
	p := openTestParent(t)
	g, err := p.Create("nested", Limits{Pids: 16})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	cmd := nestProc(t, g, "inner/deeper")
	pid := cmd.Process.Pid

	if got, err := g.procs(); err != nil || !slices.Equal(got, []int{pid}) {
		t.Errorf("procs() = %v, %v; want [%d] from the nested group", got, err, pid)
	}
	if got, err := g.Procs(); err != nil || len(got) != 0 {
		t.Errorf("Procs() = %v, %v; want none directly in the group", got, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err = g.Delete(ctx)
	if err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("Delete with a live process two levels down: %v, want an error naming the nested group", err)
	}
	t.Logf("refused Delete: %v", err)
	if s := procState(pid); s == "" || s == "Z" {
		t.Fatalf("pid %d gone (state %q) after a refused Delete", pid, s)
	}
	for _, d := range g.dirs {
		if got := readPids(filepath.Join(d, "inner/deeper")); !slices.Equal(got, []int{pid}) {
			t.Errorf("%s/inner/deeper holds %v after a refused Delete, want [%d]", d, got, pid)
		}
	}

	if err := g.Kill(t.Context()); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Errorf("nested process: Wait() = %v, want death by SIGKILL", err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Fatalf("Delete after Kill: %v", err)
	}
	for _, d := range g.dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Delete, %s: stat error %v, want not exist", d, err)
		}
	}
	if got, err := g.procs(); err != nil || len(got) != 0 {
		t.Errorf("procs() of a deleted group = %v, %v; want none", got, err)
	}
}

// TestLoadHalfRemoved checks that a v1 group whose Delete stopped after
// some hierarchies is still found, loaded and swept, and that a group of
// the same id can be made again.
func TestLoadHalfRemoved(t *testing.T) {
	p := openTestParent(t)
	if p.Version() != V1 {
		t.Skip("a group has one directory on v2")
	}
	g, err := p.Create("half", Limits{Pids: 4})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	memDir := g.dirs[p.v1.idx[ctrlMemory]]
	if err := os.Remove(memDir); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.Children(); err != nil || !slices.Equal(ids, []string{"half"}) {
		t.Errorf("Children() = %q, %v; want [half]", ids, err)
	}
	l, err := p.Load("half")
	if err != nil {
		t.Fatalf("Load of a half-removed group: %v", err)
	}
	if err := l.Delete(t.Context()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range g.dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Delete, %s: stat error %v, want not exist", d, err)
		}
	}
	if _, err := p.Load("half"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load after Delete: %v, want fs.ErrNotExist", err)
	}
	if _, err = p.Create("half", Limits{Pids: 4}); err != nil {
		t.Fatalf("Create after the sweep: %v", err)
	}
	// Only the memory directory decides whether a group is new: the
	// directories a Delete left elsewhere are reused, limits rewritten.
	if err := os.Remove(memDir); err != nil {
		t.Fatal(err)
	}
	g, err = p.Create("half", Limits{Pids: 5})
	if err != nil {
		t.Fatalf("Create over the leftovers of an interrupted Delete: %v", err)
	}
	if got := readTrim(t, filepath.Join(g.dirs[p.v1.idx[ctrlPids]], "pids.max")); got != "5" {
		t.Errorf("pids.max = %q, want 5", got)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Errorf("Delete: %v", err)
	}
}
