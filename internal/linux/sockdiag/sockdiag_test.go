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
	u, err := TCP(ns, 0, 0, Both)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before accept: %+v", u)
	// The connection not accepted holds what its receive buffer takes;
	// the rest waits in the client's. The listener is not read.
	if u.Sockets != 2 || u.Unheld < 64<<10 || u.Bytes < sent {
		t.Fatalf("before accept: %+v, want 2 sockets (the listener left out), 64 KiB unheld at least and %d bytes in all", u, sent)
	}
	// Asked for IPv6 sockets only, it finds none of these.
	if u6, err := TCP(ns, 0, 0, IPv6); err != nil || u6.Sockets != 0 {
		t.Fatalf("IPv6 only: %+v, %v; want no sockets", u6, err)
	}
	a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(a)
	u, err = TCP(ns, 0, 0, Both)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after accept: %+v", u)
	if u.Unheld != 0 || u.Bytes < sent {
		t.Fatalf("after accept: %+v, want none unheld and at least %d bytes", u, sent)
	}
	if u, err := TCP(ns, 1, 1<<31, Both); err != nil || u.Sockets != 0 {
		t.Fatalf("sockets of other owners: %+v, %v; want none", u, err)
	}
}

// TestReadStates: the states asked for are those a socket with buffers
// may be in, and neither of the two whose dump walks a table every
// namespace shares with the host's.
func TestReadStates(t *testing.T) {
	for st := range 16 {
		want := st >= 1 && st <= 12 && st != stateListen
		if got := readStates&(1<<st) != 0; got != want {
			t.Errorf("state %d asked for: %v, want %v", st, got, want)
		}
	}
	if readStates&(1<<stateBound) != 0 || readStates&(1<<stateListen) != 0 {
		t.Error("LISTEN or BOUND_INACTIVE asked for")
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
