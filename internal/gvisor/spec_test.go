package gvisor

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func valid() Container {
	return Container{
		Root: "/run/b/root", Args: []string{"/.airlock-init"}, Cwd: "/",
		Caps: []string{"CAP_SETUID"}, UID: 65535, GID: 1000, IDBase: 1 << 30, IDSize: 65536, NetNS: "/proc/self/fd/4",
		Mounts: []Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/workspace", Source: "/run/b/scratch/workspace", Type: "bind"},
			{Destination: "/usr", Source: "/usr", Type: "bind", ReadOnly: true},
		},
		MemoryBytes: 64 << 20,
	}
}

// TestConfig: the bundle maps the ids onto the range, joins the network
// namespace, keeps the root read-only, gives no capability in any set but
// the ones named as ambient (the bounding set empty), runs the process
// with the ids named, and binds as asked.
func TestConfig(t *testing.T) {
	c := valid()
	b, err := c.Config()
	if err != nil {
		t.Fatal(err)
	}
	var s ociSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if !s.Root.Readonly || s.Root.Path != c.Root || !s.Process.NoNewPrivileges {
		t.Errorf("root %+v, no new privileges %v", s.Root, s.Process.NoNewPrivileges)
	}
	caps := s.Process.Capabilities
	for _, set := range [][]string{caps.Effective, caps.Permitted, caps.Inheritable, caps.Ambient} {
		if strings.Join(set, ",") != "CAP_SETUID" {
			t.Errorf("capabilities %+v", caps)
		}
	}
	if len(caps.Bounding) != 0 {
		t.Errorf("capabilities %+v", caps)
	}
	if s.Process.User != (ociUser{UID: 65535, GID: 1000}) {
		t.Errorf("user %+v", s.Process.User)
	}
	if m := s.Linux.UIDMappings; len(m) != 1 || m[0] != (ociIDMap{0, 1 << 30, 65536}) || s.Linux.GIDMappings[0] != m[0] {
		t.Errorf("id maps %+v %+v", m, s.Linux.GIDMappings)
	}
	var netns, userns bool
	for _, ns := range s.Linux.Namespaces {
		netns = netns || ns.Type == "network" && ns.Path == c.NetNS
		userns = userns || ns.Type == "user" && ns.Path == ""
	}
	if !netns || !userns {
		t.Errorf("namespaces %+v", s.Linux.Namespaces)
	}
	want := map[string]string{"/proc": "", "/workspace": "rbind,rw", "/usr": "rbind,ro"}
	for _, m := range s.Mounts {
		if got := strings.Join(m.Options, ","); got != want[m.Destination] {
			t.Errorf("mount %s options %q, want %q", m.Destination, got, want[m.Destination])
		}
	}
	if s.Linux.Resources == nil || s.Linux.Resources.Memory.Limit != 64<<20 {
		t.Errorf("resources %+v", s.Linux.Resources)
	}
}

func TestConfigRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Container)
		want string
	}{
		{"relative root", func(c *Container) { c.Root = "root" }, "root"},
		{"no process", func(c *Container) { c.Args = nil }, "no program"},
		{"no process, looked up", func(c *Container) { c.Args, c.PathLookup = []string{""}, true }, "no program"},
		{"relative process", func(c *Container) { c.Args = []string{"init"} }, "absolute path"},
		{"relative cwd", func(c *Container) { c.Cwd = "x" }, "working directory"},
		{"no id range", func(c *Container) { c.IDBase = 0 }, "id range"},
		{"no network namespace", func(c *Container) { c.NetNS = "" }, "network namespace"},
		{"relative mount point", func(c *Container) { c.Mounts[0].Destination = "proc" }, "mount point"},
		{"relative bind source", func(c *Container) { c.Mounts[1].Source = "scratch" }, "bind source"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			c.Mounts = append([]Mount(nil), c.Mounts...)
			tt.mod(&c)
			if _, err := c.Config(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestFindRefuses(t *testing.T) {
	if _, err := Find("/nonexistent/runsc"); err == nil || !strings.Contains(err.Error(), "/nonexistent/runsc") {
		t.Fatalf("got %v", err)
	}
	dir := t.TempDir() // 0700, the test's: not root's in directories only root changes, when not root
	if _, err := Find(dir); err == nil {
		t.Fatal("a directory was taken for runsc")
	}
}

func TestVersionLine(t *testing.T) {
	tests := []struct{ out, want string }{
		{"runsc version v0.0.0-20260905035102-160fafc42237\nspec: 1.2.1\n", "v0.0.0-20260905035102-160fafc42237"},
		{"runsc version release-20260901.0\nspec: 1.1.0\n", "release-20260901.0"},
		{"runsc version VERSION_MISSING\nspec: 1.2.1\n", ""},
		{"runsc version \n", ""},
		{"something else\n", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := versionLine(tt.out); got != tt.want {
			t.Errorf("versionLine(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

// TestContainsBytes finds the marker wherever it lies, a chunk's edge
// included, and nowhere it does not.
func TestContainsBytes(t *testing.T) {
	pat := precompiledMarker
	chunk := 1 << 20
	for _, tt := range []struct {
		name string
		at   int // where pat starts, or -1 for nowhere
		size int
	}{
		{"at the start", 0, 3 << 20},
		{"in the first chunk", 1000, 3 << 20},
		{"across the first chunk's end", chunk - 10, 3 << 20},
		{"right after the first chunk", chunk, 3 << 20},
		{"across the second chunk's end", 2*chunk - len(pat) + 5, 3 << 20},
		{"at the very end", 3<<20 - len(pat), 3 << 20},
		{"absent", -1, 3 << 20},
		{"absent, small", -1, 10},
		{"empty", -1, 0},
		{"cut short", -2, 3 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Repeat([]byte{'x'}, tt.size)
			switch {
			case tt.at >= 0:
				copy(b[tt.at:], pat)
			case tt.at == -2:
				copy(b[tt.size-len(pat)+1:], pat[:len(pat)-1]) // all but its last byte, at the end
			}
			got, err := containsBytes(bytes.NewReader(b), pat)
			if err != nil || got != (tt.at >= 0) {
				t.Fatalf("containsBytes = %v, %v", got, err)
			}
		})
	}
}

// TestPrecompiled reads the runsc AIRLOCK_TEST_RUNSC names (scripts/runsc's
// build, which has the programs) when there is one.
func TestPrecompiled(t *testing.T) {
	path := os.Getenv("AIRLOCK_TEST_RUNSC")
	if path == "" {
		t.Skip("AIRLOCK_TEST_RUNSC is not set")
	}
	ok, err := Precompiled(path)
	if err != nil || !ok {
		t.Fatalf("Precompiled(%s) = %v, %v: scripts/runsc's build has the programs", path, ok, err)
	}
	if ok, err := Precompiled("/bin/true"); err != nil || ok {
		t.Fatalf("Precompiled(/bin/true) = %v, %v", ok, err)
	}
}

// TestConfigPathLookup: a one-command sandbox's command may be a name
// the guest kernel looks up in PATH, and is written as given.
func TestConfigPathLookup(t *testing.T) {
	c := valid()
	c.Args, c.PathLookup = []string{"sh", "-c", "true"}, true
	b, err := c.Config()
	if err != nil {
		t.Fatal(err)
	}
	var s ociSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Args, c.Args) {
		t.Fatalf("args %q, want %q", s.Process.Args, c.Args)
	}
}
