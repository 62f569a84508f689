package idmap

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// TestMountShiftsOwners stores files owned by one range and checks, through
// the idmapped mount, that they show as owned by the other; that the mount
// refuses writes; and that nothing on disk changed.
func TestMountShiftsOwners(t *testing.T) {
	needRoot(t)
	const from, to = 1<<30 - 65536, 1<<30 + 5*65536
	dir, err := os.MkdirTemp("/var/tmp", "idmap-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The tree's own root is stored owned by the range too: through the
	// mount a directory of an unmapped owner cannot even be searched.
	if err := os.Chown(dir, from, from); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]int{"root-file": from, "user-file": from + 1000, "foreign": 4242} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, id, id); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := UserNS(Shift{From: from, To: to, Size: 65536})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	m, err := Mount(dir, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, want := range map[string]uint32{"root-file": to, "user-file": to + 1000, "foreign": 65534} {
		var st unix.Stat_t
		if err := unix.Fstatat(int(m.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s: through the mount owner %d:%d, want %d:%d", name, st.Uid, st.Gid, want, want)
		}
	}
	// Read-only: even host root cannot write through it.
	if fd, err := unix.Openat(int(m.Fd()), "user-file", unix.O_WRONLY, 0); err == nil {
		unix.Close(fd)
		t.Error("opened a file for writing through the read-only mount")
	} else if err != unix.EROFS {
		t.Errorf("open for writing: %v, want EROFS", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "user-file"), &st); err != nil || st.Uid != from+1000 {
		t.Errorf("on disk the owner changed: %d (%v)", st.Uid, err)
	}
}

func TestUserNSRefusesBadShift(t *testing.T) {
	for _, s := range []Shift{{Size: 0}, {From: 1<<32 - 10, To: 0, Size: 65536}, {From: 0, To: 1<<32 - 10, Size: 65536}} {
		if f, err := UserNS(s); err == nil {
			f.Close()
			t.Errorf("UserNS(%+v) succeeded", s)
		}
	}
}

// BenchmarkUserNS is the cost of one shift namespace (a fork of the test
// binary); the runtime makes one per sandbox id range and keeps it.
func BenchmarkUserNS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	for b.Loop() {
		f, err := UserNS(Shift{From: 1<<30 - 65536, To: 1 << 30, Size: 65536})
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
