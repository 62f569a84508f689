package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/result"
)

// handImage lays out a tiny image root by hand, owned by the image range
// the way the image store leaves it: the test program as /bin/t, an
// /etc/resolv.conf and /etc/hosts of its own (which airlock's must hide),
// a file of user 1000, and a /proc and /workspace that are symlinks out of
// the way (which airlock's own directories must hide).
func handImage(t *testing.T, rt *Runtime) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "airlock-image-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	base := int(rt.opts.ImageIDBase)
	root := filepath.Join(dir, "rootfs")
	files := []struct {
		path string
		mode os.FileMode
		data []byte
		id   int
	}{
		{"bin", os.ModeDir | 0o755, nil, 0},
		{"bin/t", 0o755, testProg(t), 0},
		{"etc", os.ModeDir | 0o755, nil, 0},
		{"etc/passwd", 0o644, []byte("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/user:/bin/sh\n"), 0},
		{"etc/resolv.conf", 0o644, []byte("nameserver 8.8.8.8\n"), 0},
		{"etc/hosts", 0o644, []byte("6.6.6.6 localhost\n"), 0},
		{"etc/os-release", 0o644, []byte("ID=handmade\n"), 0},
		{"home", os.ModeDir | 0o755, nil, 0},
		{"usr", os.ModeDir | 0o755, nil, 0},
		{"home/user", os.ModeDir | 0o700, nil, 1000},
		{"home/user/secret", 0o600, []byte("mine"), 1000},
		{"proc", os.ModeSymlink, []byte("/etc"), 0},
		{"workspace", os.ModeSymlink, []byte("/bin"), 0},
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, base, base); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(root, f.path)
		switch {
		case f.mode.IsDir():
			err = os.Mkdir(p, f.mode.Perm())
		case f.mode&os.ModeSymlink != 0:
			err = os.Symlink(string(f.data), p)
		default:
			err = os.WriteFile(p, f.data, f.mode)
		}
		if err == nil {
			err = os.Lchown(p, base+f.id, base+f.id)
		}
		if err == nil && f.mode&os.ModeSymlink == 0 {
			err = os.Chmod(p, f.mode.Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func imageRun(t *testing.T, spec func(*Spec), argv ...string) (report, *result.Result) {
	t.Helper()
	r := run(t, runOpts{spec: spec}, argv...)
	var rep report
	if r.Outcome == result.Exited && r.ExitCode == 0 {
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(r.Stdout))), &rep); err != nil {
			t.Fatalf("%v: bad report %q (stderr %q): %v", argv, r.Stdout, r.Stderr, err)
		}
	} else {
		t.Fatalf("%v: %s exit %d: %s %s", argv, r.Outcome, r.ExitCode, r.Error, r.Stderr)
	}
	return rep, r
}

// imageCase is one command of the test program run from an image root.
type imageCase struct {
	name string
	args []string
	spec func(*Spec)
	ok   bool
	want string
}

// imageCases are the image root's cases that hold on both backends, for
// a sandbox whose spec img sets, as the default user or another (never
// root): the image's files and owners, airlock's /etc over the image's,
// its own /proc and /workspace, a read-only root, and a writable one
// where a user may write only what is theirs.
func imageCases(img func(*Spec)) []imageCase {
	writable := func(s *Spec) { img(s); s.Image.Writable = true }
	return []imageCase{
		{"image file", []string{"cat", "/etc/os-release"}, img, true, "ID=handmade\n"},
		{"resolv.conf is airlock's", []string{"cat", "/etc/resolv.conf"}, img, true, "nameserver " + ResolverIP + "\noptions timeout:2 attempts:1\n"},
		{"passwd is the image's", []string{"cat", "/etc/passwd"}, img, true, "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/user:/bin/sh\n"},
		{"hosts is airlock's", []string{"cat", "/etc/hosts"}, img, true, "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"root owns the image root", []string{"stat", "/bin/t"}, img, true, "0:0:100755"},
		{"user file shows as the user's", []string{"stat", "/home/user/secret"}, img, true, "1000:1000:100600"},
		{"user reads own file", []string{"cat", "/home/user/secret"}, img, true, "mine"},
		{"proc is a fresh proc", []string{"cat", "/proc/self/comm"}, img, true, "t\n"},
		{"workspace is the tmpfs", []string{"write", "/workspace/x", "y"}, img, true, ""},
		{"image read-only", []string{"write", "/bin/x", "y"}, img, false, ""},
		{"etc read-only", []string{"write", "/etc/os-release", "y"}, img, false, ""},
		{"user", []string{"id"}, func(s *Spec) { img(s); s.User = &User{UID: 4242, GID: 4343} }, true, "4242:4343 /workspace"},
		{"writable root, as a user", []string{"write", "/bin/x", "y"}, writable, false, ""},
		{"writable root, the user's own directory", []string{"write", "/home/user/new", "y"}, writable, true, ""},
	}
}

// runImageCases runs cases, then checks that no write reached the
// stored image at root.
func runImageCases(t *testing.T, root string, cases []imageCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			rep, _ := imageRun(t, tt.spec, append([]string{"/bin/t"}, tt.args...)...)
			if rep.OK != tt.ok || tt.ok && rep.Value != tt.want {
				t.Errorf("got ok=%v %q (%s), want ok=%v %q", rep.OK, rep.Value, rep.Error, tt.ok, tt.want)
			}
		})
	}
	for _, p := range []string{"bin/x", "home/user/new"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("a sandbox's write reached the stored image: %s: %v", p, err)
		}
	}
}

func TestImageRoot(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	img := func(s *Spec) { s.Image = &Image{Root: root} }
	runImageCases(t, root, append(imageCases(img),
		imageCase{"writable root, as the image's root", []string{"write", "/bin/x", "y"}, func(s *Spec) { img(s); s.Image.Writable = true; s.User = &User{} }, true, ""},
		imageCase{"read-only root, as the image's root", []string{"write", "/bin/x", "y"}, func(s *Spec) { img(s); s.User = &User{} }, false, ""},
	))
}

// TestEscapeAttemptsFromImage runs every escape attempt from an image
// root, as the default user and as the image's root user (who owns the
// image's files: the read-only mount, not file ownership, keeps the image
// intact), and everything holds as with the host image. Under gVisor
// too, as the default user (gVisor refuses commands as root), with its
// outcomes (gvisorEscapes).
func TestEscapeAttemptsFromImage(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	for _, be := range backends(t) {
		if !be.gvisor {
			continue
		}
		for _, tt := range escapeAttempts {
			name := strings.Join(tt.args, "-")
			if errnos, ok := gvisorEscapes[name]; ok {
				tt.errno = errnos
			}
			t.Run("gvisor "+name, func(t *testing.T) {
				r := run(t, runOpts{spec: func(s *Spec) { be.spec(s); s.Image = &Image{Root: root} }}, append([]string{"/bin/t"}, tt.args...)...)
				var rep report
				if r.Outcome == result.Exited && r.ExitCode == 0 {
					if err := json.Unmarshal([]byte(strings.TrimSpace(string(r.Stdout))), &rep); err != nil {
						t.Fatalf("bad report %q: %v", r.Stdout, err)
					}
				}
				tt.check(t, rep, r)
			})
		}
	}
	for _, u := range []*User{nil, {}} {
		for _, tt := range escapeAttempts {
			if u != nil && tt.args[0] == "setuid-root" {
				continue // uid 0 inside already; becoming it is no escape
			}
			t.Run(fmt.Sprintf("uid %v %s", u, strings.Join(tt.args, "-")), func(t *testing.T) {
				r := run(t, runOpts{spec: func(s *Spec) { s.Image = &Image{Root: root}; s.User = u }}, append([]string{"/bin/t"}, tt.args...)...)
				var rep report
				if r.Outcome == result.Exited && r.ExitCode == 0 {
					if err := json.Unmarshal([]byte(strings.TrimSpace(string(r.Stdout))), &rep); err != nil {
						t.Fatalf("bad report %q: %v", r.Stdout, err)
					}
				}
				tt.check(t, rep, r)
			})
		}
	}
}

// TestWritableImageRootIsBounded: what a writable root takes counts
// against the sandbox's disk ceiling, like /workspace and /tmp.
func TestWritableImageRootIsBounded(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	lim := DefaultLimits()
	lim.Disk, lim.Time = 4<<20, 30e9
	r := run(t, runOpts{limits: &lim, spec: func(s *Spec) { s.Image = &Image{Root: root, Writable: true}; s.User = &User{} }},
		"/bin/t", "fill", "/usr/big", "100000000")
	if r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitDisk {
		t.Fatalf("got %s %+v (%s), want the disk ceiling", r.Outcome, r.Limit, r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/big")); !os.IsNotExist(err) {
		t.Errorf("the write reached the stored image: %v", err)
	}
	// The post-mortem reads the root's own layer too.
	if pm := r.PostMortem; pm == nil || len(pm.Files) == 0 || pm.Files[0].Path != "/usr/big" || pm.Files[0].Bytes < 1<<20 ||
		len(pm.Directories) == 0 || pm.Directories[0].Path != "/usr" || strings.Contains(pm.Note, "not read") {
		t.Errorf("post-mortem %+v, want /usr/big first, in /usr", pm)
	}
}

// TestUpperLayerDescriptor: init holds the writable root's upper layer
// for the host, and no command can reach that descriptor: none inherits
// it, and init's own are closed to commands (it is not dumpable; the
// probes follow the link, as an open would, where an lstat of the link
// itself would be allowed).
func TestUpperLayerDescriptor(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	fd := -1
	run(t, runOpts{
		spec: func(s *Spec) { s.Image = &Image{Root: root, Writable: true}; s.User = &User{} },
		during: func(sb *Sandbox) {
			// From the host: init's descriptors above 3 include one
			// directory, the layer (a write through the sandbox's root
			// lands in it).
			dir := fmt.Sprintf("/proc/%d/fd", sb.InitPid())
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				n, _ := strconv.Atoi(e.Name())
				if st, err := os.Stat(dir + "/" + e.Name()); n > 3 && err == nil && st.IsDir() {
					fd = n
				}
			}
			if fd < 0 {
				t.Fatalf("init holds no directory above descriptor 3 (%d descriptors)", len(ents))
			}
			for _, probe := range []string{fmt.Sprintf("/proc/self/fd/%d/.", fd), fmt.Sprintf("/proc/1/fd/%d/.", fd)} {
				r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/t", "stat", probe}, Capture: true, KeepAlive: true})
				var rep report
				_ = json.Unmarshal([]byte(strings.TrimSpace(string(r.Stdout))), &rep)
				if rep.OK || r.Outcome != result.Exited {
					t.Errorf("a command reached %s, or failed otherwise: %s %d %q %s", probe, r.Outcome, r.ExitCode, r.Stdout, r.Error)
				}
			}
		}},
		"/bin/t", "write", "/usr/mark", "x")
}

// TestImageLock: a live sandbox holds its image's lock shared (so a store
// cannot remove the image under it), and no sandbox starts from an image
// whose lock is held exclusively (one being removed).
func TestImageLock(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	lock := filepath.Join(filepath.Dir(root), "lock")
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	try := func() error {
		f, err := os.Open(lock)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	spec := Spec{Limits: DefaultLimits(), Image: &Image{Root: root, Lock: lock}}
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := try(); err == nil {
		t.Error("the image's lock was free while a sandbox of it lived")
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := try(); err != nil {
		t.Errorf("the lock is still held after destroy: %v", err)
	}
	f, _ := os.Open(lock)
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if sb, err := rt.Create(t.Context(), spec); err == nil {
		sb.Destroy(t.Context())
		t.Error("a sandbox started from an image being removed")
	} else if !strings.Contains(err.Error(), "being removed") {
		t.Errorf("error %v, want it to say the image is being removed", err)
	}
}

// TestWritableRootAttacks attacks a writable image root's upper layer
// from inside, on each backend, and checks the effects from the host:
// no overlay attribute lands on the upper layer (one would make the
// host's overlay redirect a path or hide the image's files), no device
// node is made, the upper layer's mount runs no set-uid file and opens
// no device, the host's files API follows no link planted there, and a
// copy-up leaves the stored image as it was.
func TestWritableRootAttacks(t *testing.T) {
	rt := testRuntime(t)
	root := handImage(t, rt)
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			spec := Spec{Limits: DefaultLimits(), Isolation: isolationOf(be), Image: &Image{Root: root, Writable: true}}
			sb, err := rt.Create(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(t.Context())
			do := func(args ...string) report {
				t.Helper()
				r := sb.Exec(t.Context(), ExecRequest{Argv: append([]string{"/bin/t"}, args...), Capture: true, KeepAlive: true})
				var rep report
				if r.Outcome != result.Exited || json.Unmarshal(bytes.TrimSpace(r.Stdout), &rep) != nil {
					t.Fatalf("%v: %s %d %q %q %s", args, r.Outcome, r.ExitCode, r.Stdout, r.Stderr, r.Error)
				}
				return rep
			}
			for _, a := range [][]string{
				{"setxattr", "/home/user/secret", "trusted.overlay.redirect", "/etc"},
				{"setxattr", "/home/user/secret", "trusted.overlay.metacopy", ""},
				{"setxattr", "/home/user", "trusted.overlay.opaque", "y"},
				{"mknod-at", "/home/user/sda"},
			} {
				if rep := do(a...); rep.OK {
					t.Errorf("%v: allowed", a)
				}
			}
			for _, a := range [][]string{
				{"write", "/home/user/secret", "changed"},
				{"symlink", "/etc/shadow", "/home/user/evil"},
				{"symlink", "../../../../../../../../etc/shadow", "/home/user/evil2"},
				{"write", "/home/user/suid", "x"},
				{"chmod", "/home/user/suid", "4755"},
			} {
				if rep := do(a...); !rep.OK {
					t.Fatalf("%v: %s", a, rep.Error)
				}
			}
			if b, err := os.ReadFile(filepath.Join(root, "home/user/secret")); err != nil || string(b) != "mine" {
				t.Errorf("the stored image's file after a copy-up: %q %v", b, err)
			}
			// The upper layer, as the host holds it.
			var st unix.Statfs_t
			if err := unix.Fstatfs(sb.upper, &st); err != nil {
				t.Fatal(err)
			}
			if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
				t.Errorf("the upper layer's mount flags %#x: want nosuid and nodev", st.Flags)
			}
			upper := fmt.Sprintf("/proc/self/fd/%d/", sb.upper)
			for _, p := range []string{"home/user/secret", "home/user"} {
				for _, x := range []string{"trusted.overlay.redirect", "trusted.overlay.metacopy", "trusted.overlay.opaque"} {
					if _, err := unix.Lgetxattr(upper+p, x, make([]byte, 256)); err != unix.ENODATA && err != unix.ENOTSUP {
						t.Errorf("%s of %s in the upper layer: %v, want none", x, p, err)
					}
				}
			}
			if b, err := os.ReadFile(upper + "home/user/secret"); err != nil || string(b) != "changed" {
				t.Errorf("the copied-up file in the upper layer: %q %v", b, err)
			}
			if _, err := os.Lstat(upper + "home/user/sda"); !os.IsNotExist(err) {
				t.Errorf("a device node in the upper layer: %v", err)
			}
			dir, err := sb.OpenRoot()
			if err != nil {
				t.Fatal(err)
			}
			defer dir.Close()
			for _, p := range []string{"home/user/evil", "home/user/evil2"} {
				if f, err := inroot.Open(dir, p); err == nil {
					f.Close()
					t.Errorf("the host's files API followed %s", p)
				}
			}
		})
	}
}
