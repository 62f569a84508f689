package sockdiag

import (
	"testing"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestTCPUnheld: data sent to a connection not accepted yet is Unheld
// (no cgroup is charged for it); once accepted, it is held, and sockets
// of other owners are not counted.
func TestTCPUnheld(t *testing.T) {
	testutil.RequireRoot(t)
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var l, c int
	const sent = 256 << 10
	err = netns.Do(ns, func() error {
		if l, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 8); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		if c, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Connect(c, sa)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(l)
	defer unix.Close(c)
	for n := 0; n < sent; {
		w, err := unix.Write(c, make([]byte, 64<<10))
		if err != nil {
			t.Fatal(err)
		}
		n += w
	}
	u, err := TCP(ns, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before accept: %+v", u)
	// The connection not accepted holds what its receive buffer takes;
	// the rest waits in the client's.
	if u.Sockets != 3 || u.Unheld < 64<<10 || u.Bytes < sent {
		t.Fatalf("before accept: %+v, want 3 sockets, 64 KiB unheld at least and %d bytes in all", u, sent)
	}
	a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(a)
	u, err = TCP(ns, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after accept: %+v", u)
	if u.Unheld != 0 || u.Bytes < sent {
		t.Fatalf("after accept: %+v, want none unheld and at least %d bytes", u, sent)
	}
	if u, err := TCP(ns, 1, 1<<31); err != nil || u.Sockets != 0 {
		t.Fatalf("sockets of other owners: %+v, %v; want none", u, err)
	}
}

// TestParse: malformed answers end the dump with an error, never a panic.
func TestParse(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		done bool
		err  bool
	}{
		{"empty", nil, false, false},
		{"length past the end", []byte{255, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true, true},
		{"length below the header", []byte{4, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true, true},
		{"done", []byte{16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true, false},
		{"short message", []byte{20, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, false, false},
	}
	for _, tt := range tests {
		var u Usage
		done, err := parse(tt.b, 0, ^uint32(0), &u)
		if done != tt.done || (err != nil) != tt.err {
			t.Errorf("%s: parse = %v, %v; want done %v, error %v", tt.name, done, err, tt.done, tt.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte{16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var u Usage
		_, _ = parse(b, 0, ^uint32(0), &u)
	})
}
