package initproto

import (
	"errors"
	"os"
	"testing"

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

// recv reads from fd as init does: non-blocking, through the poller.
func recv(t *testing.T, fd int, buf []byte) (*Message, []int, error) {
	t.Helper()
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "b")
	t.Cleanup(func() { f.Close() })
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return RecvRaw(rc, buf)
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

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		flags int
	}{
		{"garbage", "{", 0},
		{"unknown kind", `{"k":"boom"}`, 0},
		{"negative pid", `{"k":"started","pid":-1}`, 0},
		{"truncated", `{"k":"ready"}`, unix.MSG_TRUNC},
		{"wrong type", `{"k":"exit","status":"x"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := Decode([]byte(tt.in), tt.flags); err == nil {
				t.Fatalf("Decode(%q) = %+v, want error", tt.in, m)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"k":"exit","id":3,"status":256}`))
	f.Add([]byte(`{"k":"started","id":1,"pid":5}`))
	f.Add([]byte(`{"k":"fail","error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, 0)
		if err != nil {
			return
		}
		if m.Pid < 0 {
			t.Fatalf("accepted negative pid %d", m.Pid)
		}
	})
}
