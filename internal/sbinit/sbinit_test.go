package sbinit

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/forkexec"
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
	if err := validate(&setupOK); err != nil {
		t.Fatalf("valid setup refused: %v", err)
	}
	img := setupOK
	img.Image = &ImageRoot{}
	if err := validate(&img); err != nil {
		t.Fatalf("valid image setup refused: %v", err)
	}
	for name, adjust := range map[string]func(*Setup){
		"relative root":          func(c *Setup) { c.RootDir = "relative" },
		"root with overlay sep":  func(c *Setup) { c.Image = &ImageRoot{}; c.RootDir = "/run/a:b" },
		"root with overlay sep2": func(c *Setup) { c.Image = &ImageRoot{}; c.RootDir = "/run/a,upperdir=/x" },
		"scratch with overlay sep": func(c *Setup) {
			c.Image = &ImageRoot{Writable: true}
			c.ScratchDir = "/run/a,lowerdir=/"
		},
		"seeded scratch with overlay sep": func(c *Setup) {
			c.Seed = true
			c.ScratchDir = "/run/a,lowerdir=/"
		},
		// Init sharing the commands' uid could be signalled by them.
		"init uid is the commands'": func(c *Setup) { c.InitUID = c.UID },
		"negative uid":              func(c *Setup) { c.UID = -1 },
		"scratch inside the root":   func(c *Setup) { c.ScratchDir = "/run/x/s" },
		"relative scratch":          func(c *Setup) { c.ScratchDir = "s" },
		"relative bind":             func(c *Setup) { c.Binds = []Bind{{Source: "/usr", Target: "usr"}} },
		"bind up and out":           func(c *Setup) { c.Binds = []Bind{{Source: "/usr", Target: "/a/../../b"}} },
		"file up and out":           func(c *Setup) { c.Files = []File{{Path: "/etc/../../x"}} },
		"device with a slash":       func(c *Setup) { c.Devices = []string{"../sda"} },
	} {
		bad := setupOK
		adjust(&bad)
		if validate(&bad) == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := Program(&bad); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

var setupOK = Setup{RootDir: "/run/x", ScratchDir: "/run/s", DiskBytes: 1 << 20, DiskInodes: 100, Workdir: "/workspace", UID: 1000, GID: 1000, InitUID: 65535, Hostname: "sandbox"}

// TestProgram compiles setups and checks the program's shape: every
// directory made once, parents first; binds of a directory tried plain,
// then with their submounts; the confinement last, seccomp at its end;
// the image's mount as the program's one file.
func TestProgram(t *testing.T) {
	c := setupOK
	c.Binds = []Bind{{Source: "/usr", Target: "/usr"}, {Source: "/etc/ld.so.cache", Target: "/etc/ld.so.cache", File: true}, {Source: "/srv/tool", Target: "/opt/tool/bin"}}
	c.Symlinks = []Symlink{{Target: "usr/bin", Path: "/bin"}}
	c.Files = []File{{Path: "/etc/hosts", Data: "127.0.0.1 localhost\n", Mode: 0o644}}
	c.Devices = []string{"null", "zero"}
	c.Seccomp = make([]byte, 8)
	p, err := Program(&c)
	if err != nil {
		t.Fatal(err)
	}
	if p.NFiles != 0 {
		t.Errorf("%d files without an image", p.NFiles)
	}
	seen := map[string]int{}
	for i, op := range p.Ops {
		seen[op.What]++
		if op.Trap == unix.SYS_MKDIRAT && seen[op.What] > 1 {
			t.Errorf("op %d: %s twice", i, op.What)
		}
	}
	for _, want := range []string{
		"make /run/x/opt", "make /run/x/opt/tool", "make /run/x/opt/tool/bin",
		"bind /srv/tool on /run/x/opt/tool/bin", "bind /srv/tool and its submounts on /run/x/opt/tool/bin",
		"create /run/x/etc/ld.so.cache", "write /run/x/etc/hosts", "symlink /bin",
		"mask /proc/kcore", "pivot_root", "setresuid", "install the seccomp filter",
	} {
		if seen[want] == 0 {
			t.Errorf("no op %q", want)
		}
	}
	idx := func(what string) int {
		for i, op := range p.Ops {
			if op.What == what {
				return i
			}
		}
		return -1
	}
	if !(idx("make /run/x/opt") < idx("make /run/x/opt/tool") && idx("make /run/x/opt/tool") < idx("make /run/x/opt/tool/bin")) {
		t.Error("parents are not made first")
	}
	if !(idx("pivot_root") < idx("setresuid") && idx("setresuid") < idx("install the seccomp filter")) || idx("install the seccomp filter") != len(p.Ops)-1 {
		t.Error("confinement out of order: seccomp must come last, after the uid change")
	}
	if b := p.Ops[idx("bind /srv/tool on /run/x/opt/tool/bin")]; b.Skip != 1 || b.Else[0].Errno != unix.EINVAL {
		t.Errorf("plain bind: skip %d, else %v; want the recursive bind only on EINVAL", b.Skip, b.Else)
	}

	img := c
	img.Image = &ImageRoot{Writable: true}
	p, err = Program(&img)
	if err != nil {
		t.Fatal(err)
	}
	if p.NFiles != 1 {
		t.Errorf("image setup: %d files, want one (the image's mount)", p.NFiles)
	}
	for _, op := range p.Ops {
		if op.What == "make / read-only" {
			t.Error("a writable image's root is made read-only")
		}
		// (Below /dev, on its own tmpfs, is made afresh.)
		if op.Trap == unix.SYS_MKDIRAT && strings.HasPrefix(op.What, "make /run/x/.airlock-root/") && !strings.HasPrefix(op.What, "make /run/x/.airlock-root/dev/") {
			t.Errorf("%s: the merged root's mount points come from the generated layer", op.What)
		}
	}

	// A seed: one more file, after the image's and the volumes'; the
	// workspace and /tmp are overlays over it, not binds.
	seeded := img
	seeded.Volumes = []string{"/data"}
	seeded.Seed = true
	p, err = Program(&seeded)
	if err != nil {
		t.Fatal(err)
	}
	if p.NFiles != 3 {
		t.Errorf("seeded setup: %d files, want 3 (image, volume, seed)", p.NFiles)
	}
	var overlays []string
	for _, op := range p.Ops {
		switch {
		case op.What == "attach the seed" && (op.Args[0].Kind != forkexec.ArgSlot || op.Args[0].Index != 2):
			t.Errorf("the seed is attached from %+v, want slot 2", op.Args[0])
		case op.What == "bind /run/x/.airlock-root/workspace" || op.What == "bind /run/x/.airlock-root/tmp":
			t.Errorf("%s: a seeded sandbox's directory is bound, not an overlay", op.What)
		case strings.HasSuffix(op.What, " over the seed's"):
			overlays = append(overlays, op.What)
		}
	}
	if len(overlays) != 2 {
		t.Errorf("overlays over the seed: %q; want /workspace and /tmp", overlays)
	}

	// A bind below a symlink the setup makes cannot be built.
	bad := c
	bad.Binds = append(bad.Binds, Bind{Source: "/srv/x", Target: "/bin/x"})
	if _, err := Program(&bad); err == nil {
		t.Error("a bind below a symlink compiled")
	}
}

func TestCPUsRoundTrip(t *testing.T) {
	for _, cpus := range [][]int{{0}, {0, 1}, {1}, {63}, {64}, {0, 5, 64, 130}, {1023}} {
		var set unix.CPUSet
		for _, c := range cpus {
			set.Set(c)
		}
		s := FormatCPUs(&set)
		got, ok := parseCPUs(s)
		if !ok || got != set {
			t.Errorf("%v: %q parsed back as %v, %v", cpus, s, got, ok)
		}
	}
	for _, bad := range []string{"", "0", "x", "3,", ",3", "3,zz", "1" + strings.Repeat(",0", 16)} {
		if set, ok := parseCPUs(bad); ok {
			t.Errorf("parseCPUs(%q) = %v, want refused", bad, set)
		}
	}
}

// TestFDWatchSchedule: the first look is fdWatchEvery after a command's
// start, empty looks double the interval up to fdWatchMax, and another
// command's start brings the next look forward again.
func TestFDWatchSchedule(t *testing.T) {
	w := &fdWatch{ceiling: 1 << 20, last: strconv.Itoa(1<<20 - 1)}
	t0 := time.Unix(1000, 0)
	w.started(t0, false)
	if got := w.wait(t0, -1); got != 50 {
		t.Fatalf("first wait %d ms, want 50", got)
	}
	if got := w.wait(t0, 20); got != 20 {
		t.Fatalf("wait under a shorter timeout: %d ms, want 20", got)
	}
	now := t0
	var waits []int
	for range 7 {
		now = w.next
		w.look(now) // no process holds 2^20 descriptors
		waits = append(waits, w.wait(now, -1))
	}
	if want := []int{100, 200, 400, 800, 1000, 1000, 1000}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	w.started(now, true)
	if got := w.wait(now, -1); got != 50 {
		t.Fatalf("wait after another start: %d ms, want 50", got)
	}
	if w.sent {
		t.Fatal("a breach was told")
	}
}
