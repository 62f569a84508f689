package initproto

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"testing"

	"github.com/airlockhq/airlock/internal/wire"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	return fds[0], fds[1]
}

// recv reads from fd as init does.
func recv(t *testing.T, fd int, buf []byte) (*Message, []int, error) {
	t.Helper()
	return RecvFD(fd, buf, false)
}

func TestSendRecvWithDescriptors(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	want := &Message{Kind: KindExec, ID: 7, Exec: &Exec{Argv: []string{"echo", "hi"}, Dir: "/workspace"}}
	if err := Send(a, want, []int{int(w.Fd())}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, MaxMessage)
	got, fds, err := recv(t, b, buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindExec || got.ID != 7 || got.Exec.Argv[1] != "hi" {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if len(fds) != 1 {
		t.Fatalf("got %d fds, want 1", len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "w")
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	one := make([]byte, 1)
	if _, err := r.Read(one); err != nil || one[0] != 'x' {
		t.Fatalf("got %q %v through passed pipe, want x", one, err)
	}
}

// TestConnDescriptors sends the host's Conn what init might, descriptors
// included: a terminal's master side comes only with a started or exit
// message, one at a time, and PTYMaster tells a real one from anything
// else init could send.
func TestConnDescriptors(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	slave, _, e := unix.Syscall(unix.SYS_IOCTL, ptmx.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if e != 0 {
		t.Fatal(e)
	}
	defer unix.Close(int(slave))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	master, pipe := int(ptmx.Fd()), int(r.Fd())
	tests := []struct {
		name    string
		kind    Kind
		fds     []int
		recvErr bool
		master  bool // PTYMaster accepts what came
	}{
		{"started with a master", KindStarted, []int{master}, false, true},
		{"exit with a master", KindExit, []int{master}, false, true},
		{"started with a pipe", KindStarted, []int{pipe}, false, false},
		{"started with the slave side", KindStarted, []int{int(slave)}, false, false},
		{"ready with a descriptor", KindReady, []int{master}, true, false},
		{"started with two", KindStarted, []int{master, pipe}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pair(t)
			c, err := NewConn(b)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := Send(a, &Message{Kind: tt.kind, ID: 1, Pid: 2}, tt.fds); err != nil {
				t.Fatal(err)
			}
			m, f, err := c.Recv()
			if tt.recvErr {
				if err == nil || f != nil {
					t.Fatalf("Recv = %+v, %v, %v; want an error and no file", m, f, err)
				}
				return
			}
			if err != nil || f == nil || m.Kind != tt.kind {
				t.Fatalf("Recv = %+v, %v, %v; want the message and its file", m, f, err)
			}
			defer f.Close()
			if err := PTYMaster(f); (err == nil) != tt.master {
				t.Fatalf("PTYMaster = %v, want accepted %v", err, tt.master)
			}
		})
	}
}

func TestRecvClosed(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[0])
	_, _, err = recv(t, fds[1], make([]byte, MaxMessage))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// raw builds a datagram field by field, as Marshal would.
func raw(fields ...func(*wire.Writer)) []byte {
	w := &wire.Writer{}
	for _, f := range fields {
		f(w)
	}
	return w.B
}

func u(v uint64) func(*wire.Writer) { return func(w *wire.Writer) { w.Uint(v) } }
func i(v int64) func(*wire.Writer)  { return func(w *wire.Writer) { w.Int(v) } }
func str(s string) func(*wire.Writer) {
	return func(w *wire.Writer) { w.String(s) }
}
func b(v bool) func(*wire.Writer) { return func(w *wire.Writer) { w.Bool(v) } }

func TestDecodeRejects(t *testing.T) {
	ok := func(kind uint64) []func(*wire.Writer) {
		return []func(*wire.Writer){u(Version), u(kind), u(1), i(5), i(0), i(0), str(""), i(0), b(false), i(0), u(0), u(0)}
	}
	if _, err := Decode(raw(ok(3)...), 0); err != nil {
		t.Fatalf("a well-formed started message: %v", err)
	}
	tests := []struct {
		name  string
		in    []byte
		flags int
		is    error
	}{
		{"empty", nil, 0, nil},
		{"another build", raw(append([]func(*wire.Writer){u(Version + 1)}, ok(3)[1:]...)...), 0, ErrVersion},
		{"unknown kind", raw(append([]func(*wire.Writer){u(Version), u(99)}, ok(3)[2:]...)...), 0, nil},
		{"negative pid", raw(u(Version), u(3), u(1), i(-1), i(0), i(0), str(""), i(0), b(false)), 0, nil},
		{"truncated by the kernel", raw(ok(1)...), unix.MSG_TRUNC, nil},
		{"cut short", raw(ok(3)...)[:5], 0, nil},
		{"trailing bytes", append(raw(ok(3)...), 0), 0, nil},
		{"bad boolean", raw(u(Version), u(3), u(1), i(5), i(0), i(0), str(""), i(0), u(7)), 0, nil},
		{"string longer than the message", raw(u(Version), u(1), u(1), i(0), i(0), i(0), u(1<<40)), 0, nil},
		{"huge count", raw(u(Version), u(2), u(1), i(0), i(0), i(0), str(""), i(0), b(true), u(1<<40)), 0, nil},
		{"signal out of range", raw(u(Version), u(5), u(1), i(0), i(0), i(0), str(""), i(65), b(false)), 0, nil},
		{"negative signal", raw(u(Version), u(5), u(1), i(0), i(0), i(0), str(""), i(-9), b(false)), 0, nil},
		{"negative count", raw(u(Version), u(6), u(0), i(3), i(0), i(0), str(""), i(0), b(false), i(-1), u(0), u(0)), 0, nil},
		{"resize wider than 16 bits", raw(u(Version), u(7), u(1), i(0), i(0), i(0), str(""), i(0), b(false), i(0), u(24), u(1<<16)), 0, nil},
		{"window wider than 16 bits", raw(u(Version), u(2), u(1), i(0), i(0), i(0), str(""), i(0), b(true), u(1), str("sh"), u(0), str("/"), b(true), u(24), u(1<<16)), 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(tt.in, tt.flags)
			if err == nil {
				t.Fatalf("Decode = %+v, want an error", m)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("Decode: %v, want %v", err, tt.is)
			}
		})
	}
}

// fill sets every field reachable from v to a value that is not the zero
// value, so that a round trip shows any field the codec forgets.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for j := range v.NumField() {
			fill(v.Field(j), n)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for j := range 2 {
			fill(s.Index(j), n)
		}
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * 1000003)
	case reflect.Uint8:
		v.SetUint(uint64(*n % 256))
	case reflect.Uint16:
		v.SetUint(uint64(*n) * 251)
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n) * 7919)
	default:
		panic("fill: add " + v.Kind().String())
	}
}

// TestRoundTrip encodes a message with every field set and decodes it
// back whole; the kind is fixed afterwards, as the codec only knows the
// declared kinds.
func TestRoundTrip(t *testing.T) {
	for _, k := range kinds {
		var m Message
		n := 0
		fill(reflect.ValueOf(&m).Elem(), &n)
		m.Kind, m.Signal = k, 15
		b, err := Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, 0)
		if err != nil {
			t.Fatalf("%s: Decode: %v", k, err)
		}
		if !reflect.DeepEqual(got, &m) {
			t.Fatalf("%s: round trip lost something:\n got %+v\nwant %+v", k, got, &m)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range []*Message{
		{Kind: KindExit, ID: 3, Status: 256},
		{Kind: KindStarted, ID: 1, Pid: 5},
		{Kind: KindFail, Error: "x"},
		{Kind: KindDescriptors, Pid: 7, Count: 1024},
		{Kind: KindResize, ID: 3, Rows: 50, Cols: 132},
		{Kind: KindExec, ID: 2, Exec: &Exec{Argv: []string{"sh", "-c", "true"}, Env: []string{"A=b"}, Dir: "/workspace"}},
		{Kind: KindExec, ID: 4, Exec: &Exec{Argv: []string{"bash"}, Dir: "/workspace", TTY: true, Rows: 24, Cols: 80}},
	} {
		b, err := Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, 0)
		if err != nil {
			return
		}
		if m.Pid < 0 {
			t.Fatalf("accepted negative pid %d", m.Pid)
		}
		// What decodes encodes again to something that decodes the same.
		again, err := Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := Decode(again, 0)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip of a decoded message: %v\n%+v\n%+v", err, m, m2)
		}
	})
}

// TestConnHoldsNoReplyBuffer checks that a Conn borrows the buffer a
// reply is read into for that read only: a sandbox's start (a Conn made,
// a reply read) allocates far less than a reply's largest size, and an
// idle Conn holds none of it.
func TestConnHoldsNoReplyBuffer(t *testing.T) {
	const rounds = 200
	var before, after runtimeStats
	before.read()
	for range rounds {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewConn(fds[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := Send(fds[1], &Message{Kind: KindReady}, nil); err != nil {
			t.Fatal(err)
		}
		m, _, err := c.Recv()
		if err != nil || m.Kind != KindReady {
			t.Fatalf("Recv = %v, %v", m, err)
		}
		c.Close()
		unix.Close(fds[1])
	}
	after.read()
	if per := (after.alloc - before.alloc) / rounds; per >= maxReply/2 {
		t.Errorf("a Conn made and a reply read allocated %d bytes, want under %d (a reply buffer of its own is %d)", per, maxReply/2, maxReply)
	}
}

type runtimeStats struct{ alloc uint64 }

func (s *runtimeStats) read() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.alloc = m.TotalAlloc
}
