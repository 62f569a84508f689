// Package initproto is the control protocol between the airlock process on the
// host and the init process (PID 1) inside a sandbox. Messages are one per
// datagram on a SOCK_SEQPACKET unix socket pair, in the compact encoding of
// internal/wire (codec.go), each led by the protocol Version; file
// descriptors travel with a message as SCM_RIGHTS: the command's stdin,
// stdout and stderr with an exec request, and the master side of the
// pseudo-terminal init opened for a command that asked for one with its
// started message.
//
// Messages from init are untrusted input to the host: init lives inside the
// sandbox from its exec on (the sandbox is built before), so the host
// validates everything it decodes.
package initproto

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the protocol this build speaks between the host, the spawner
// and init. The host refuses a spawner, and init refuses a host, that
// speaks another: airlock and airlock-init come from one build. Bump it
// with every change to a message or to what a field means
// (TestProtocolShape fails until it is bumped).
const Version = 10

// MaxMessage is the largest datagram init accepts (an exec request's
// command line and environment must fit).
const MaxMessage = 256 << 10

// maxReply is the largest datagram the host accepts from init: init only
// ever says ready, started, exit, fds or why it could not start. Keeping the host's
// buffer small keeps an idle sandbox cheap.
const maxReply = 16 << 10

// maxFDs is the most descriptors one message may carry.
const maxFDs = 3

// Kind names a message.
type Kind string

// Message kinds.
const (
	// KindReady (init→host), init's first message: it runs, confined
	// (the sandbox was built before its exec), and waits for exec
	// requests.
	KindReady Kind = "ready"
	// KindFail (init→host), instead of ready: init could not finish its
	// start; Error says why.
	KindFail Kind = "fail"
	// KindExec (host→init) carries Exec and three descriptors: the
	// command's stdin, stdout and stderr; or none when Exec.TTY is set.
	KindExec Kind = "exec"
	// KindStarted (init→host): the command with ID runs as Pid. For a
	// command with a terminal (Exec.TTY) it carries one descriptor: the
	// terminal's master side, which init no longer holds.
	KindStarted Kind = "started"
	// KindExit (init→host): the command with ID ended with wait status
	// Status, or could not be started (Errno set).
	KindExit Kind = "exit"
	// KindSignal (host→init): send Signal to the command with ID and
	// every process of its process group; the sandbox goes on.
	KindSignal Kind = "signal"
	// KindDescriptors (init→host, under gVisor only): the sandbox's
	// process Pid (the guest's number) holds Count descriptors, as many
	// as the descriptor ceiling lets it. Under gVisor the commands'
	// descriptors are the guest kernel's, out of the host's sight, so
	// init looks for the host (see sbinit's fdWatch).
	KindDescriptors Kind = "fds"
	// KindResize (host→init, under gVisor only): the terminal of the
	// command with ID, which init relays (see Exec.TTY), is now Rows by
	// Cols.
	KindResize Kind = "resize"
)

// PTYFailed leads the Error of a KindExit for a command whose terminal
// init could not open, as against one that could not be started.
const PTYFailed = "open a pseudo-terminal: "

// Message is one datagram.
type Message struct {
	Kind Kind
	ID   uint64
	Exec *Exec
	Pid  int
	// Status is a raw wait(2) status.
	Status int
	// Errno is set when the command could not be executed.
	Errno int
	Error string
	// Signal is a KindSignal's signal number.
	Signal int
	// Count is a KindDescriptors's number of descriptors.
	Count int
	// Rows and Cols are a KindResize's window size.
	Rows, Cols uint16
}

// Exec asks init to start one command.
type Exec struct {
	Argv []string
	Env  []string
	Dir  string
	// TTY asks for a pseudo-terminal of the sandbox's own devpts as the
	// command's stdin, stdout, stderr and controlling terminal, of Rows
	// by Cols (0 for unknown). Init sends its master side out with the
	// started message; under gVisor, which sends no descriptor of the
	// guest's out, the request carries the three pipes a command without
	// a terminal gets instead, and init relays between them and the
	// master: what is written to the first is typed, and what the
	// terminal shows goes to the second (the third is not used).
	TTY        bool
	Rows, Cols uint16
}

// ErrTooLarge is returned by Send for a message over MaxMessage bytes.
var ErrTooLarge = fmt.Errorf("message exceeds %d bytes", MaxMessage)

// ErrClosed is returned by RecvRaw and Conn.Recv when the peer closed the socket.
var ErrClosed = errors.New("control channel closed")

// ErrVersion says the two ends come from different builds.
var ErrVersion = errors.New("airlock and airlock-init are from different builds")

// encode renders a message and its descriptors as a datagram and its
// control data.
func encode(m *Message, fds []int) (b, oob []byte, err error) {
	b, err = Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	if len(b) > MaxMessage {
		return nil, nil, fmt.Errorf("encode %s: %w", m.Kind, ErrTooLarge)
	}
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return b, oob, nil
}

// Send writes one message with optional descriptors on a blocking socket.
func Send(fd int, m *Message, fds []int) error {
	b, oob, err := encode(m, fds)
	if err != nil {
		return err
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("send %s: %w", m.Kind, err)
	}
	return nil
}

// RecvFD reads one message from fd with recvmsg on the calling thread:
// blocking on a blocking socket, or with dontWait an error wrapping
// unix.EAGAIN when nothing is queued. buf must hold MaxMessage bytes.
// Descriptors that arrive with it are returned; the caller owns them. A
// malformed message closes any descriptors it carried and returns an
// error.
func RecvFD(fd int, buf []byte, dontWait bool) (*Message, []int, error) {
	var oobBuf [64]byte
	oob := oobBuf[:unix.CmsgSpace(maxFDs*4)]
	flags := unix.MSG_CMSG_CLOEXEC
	if dontWait {
		flags |= unix.MSG_DONTWAIT
	}
	var n, oobn, rflags int
	var err error
	for {
		n, oobn, rflags, _, err = unix.Recvmsg(fd, buf, oob, flags)
		if err != unix.EINTR {
			break
		}
	}
	return finishRecv(buf, oob, n, oobn, rflags, err)
}

func finishRecv(buf, oob []byte, n, oobn, flags int, err error) (*Message, []int, error) {
	if err != nil {
		return nil, nil, fmt.Errorf("receive: %w", err)
	}
	fds, ferr := parseRights(oob[:oobn])
	if n == 0 && oobn == 0 {
		return nil, nil, ErrClosed
	}
	m, derr := Decode(buf[:n], flags)
	if err := errors.Join(ferr, derr); err != nil {
		closeAll(fds)
		return nil, nil, err
	}
	return m, fds, nil
}

// Decode parses one datagram. flags are the recvmsg flags (truncation is an
// error).
func Decode(b []byte, flags int) (*Message, error) {
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return nil, errors.New("receive: message truncated")
	}
	m, err := Unmarshal(b)
	if err != nil {
		return nil, err
	}
	if m.Pid < 0 {
		return nil, fmt.Errorf("decode: negative pid %d", m.Pid)
	}
	return m, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("receive: control message: %w", err)
	}
	var fds []int
	var errs error
	for _, cm := range msgs {
		got, err := unix.ParseUnixRights(&cm)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("receive: rights: %w", err))
			continue
		}
		fds = append(fds, got...)
	}
	return fds, errs
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Conn is the host's end of the control channel. It goes through the Go
// runtime's poller, so an idle sandbox costs a parked goroutine, not a
// blocked thread.
type Conn struct {
	f   *os.File
	rc  syscall.RawConn
	oob []byte
}

// replyBufs holds the buffers replies are read into. A Conn takes one
// only while a reply is there to read: an idle sandbox's Conn held its
// own 16 KiB, and every sandbox's start allocated it afresh.
var replyBufs = sync.Pool{New: func() any { return new([maxReply]byte) }}

// NewConn wraps a connected SOCK_SEQPACKET unix socket, which it makes
// non-blocking; the Conn owns fd.
func NewConn(fd int) (*Conn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "ctrl")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Conn{f: f, rc: rc, oob: make([]byte, unix.CmsgSpace(maxFDs*4))}, nil
}

// Send writes one message with optional descriptors.
func (c *Conn) Send(m *Message, fds []int) error {
	b, oob, err := encode(m, fds)
	if err != nil {
		return err
	}
	werr := c.rc.Write(func(fd uintptr) bool {
		err = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return err != unix.EAGAIN
	})
	if werr != nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("send %s: %w", m.Kind, err)
	}
	return nil
}

// Recv reads one message; it is not safe for concurrent use. Descriptors
// are accepted from init only as the one of a started or exit message: any
// others are closed and the message is refused. A descriptor that comes is returned,
// close-on-exec, and the caller owns it (see PTYMaster for what it may be).
func (c *Conn) Recv() (*Message, *os.File, error) {
	var n, oobn, flags int
	var err error
	// The message is decoded (which copies what it keeps) while the
	// buffer is held: it goes back to the pool before the next wait.
	var m *Message
	var derr error
	rerr := c.rc.Read(func(fd uintptr) bool {
		buf := replyBufs.Get().(*[maxReply]byte)
		defer replyBufs.Put(buf)
		n, oobn, flags, _, err = unix.Recvmsg(int(fd), buf[:], c.oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		if err == nil && (n > 0 || oobn > 0) {
			m, derr = Decode(buf[:n], flags)
		}
		return err != unix.EAGAIN
	})
	if rerr != nil {
		err = rerr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("receive: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, nil, ErrClosed
	}
	var fds []int
	if oobn > 0 {
		var perr error
		fds, perr = parseRights(c.oob[:oobn])
		if perr != nil || flags&unix.MSG_CTRUNC != 0 {
			closeAll(fds)
			return nil, nil, errors.Join(perr, errors.New("receive: descriptors truncated"))
		}
	}
	err = derr
	switch {
	case err != nil:
		closeAll(fds)
		return nil, nil, err
	case len(fds) == 0:
		return m, nil, nil
	case len(fds) > 1 || m.Kind != KindStarted && m.Kind != KindExit:
		closeAll(fds)
		return nil, nil, fmt.Errorf("receive: unexpected descriptors from init with %s", m.Kind)
	}
	// Non-blocking, so that the file goes through the Go poller: reads
	// and writes park goroutines, and deadlines work.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("receive: %w", err)
	}
	return m, os.NewFile(uintptr(fds[0]), "pty"), nil
}

// PTYMaster checks that f, a descriptor from init, is what a started
// message of a command with a terminal carries: the master side of a
// pseudo-terminal (opened through a devpts instance's ptmx, character
// device 5:2), on which the host then only reads, writes and sets the
// window size. Anything else (a pipe, a file, a socket, a terminal's other
// side) is refused.
func PTYMaster(f *os.File) error {
	rc, err := f.SyscallConn() // not Fd, which would make f blocking
	if err != nil {
		return fmt.Errorf("terminal from init: %w", err)
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = isPTYMaster(int(fd)) }); err != nil {
		return fmt.Errorf("terminal from init: %w", err)
	}
	return cerr
}

func isPTYMaster(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("terminal from init: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 5 || unix.Minor(st.Rdev) != 2 {
		return fmt.Errorf("terminal from init: not a pseudo-terminal master (mode %#o, device %d:%d)", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if _, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN); err != nil {
		return fmt.Errorf("terminal from init: not a pseudo-terminal master: %w", err)
	}
	return nil
}

// SetReadDeadline bounds a Recv waiting on the connection (the zero time
// for none); a Recv past it fails with an error that wraps
// os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// Close closes the connection; a Recv waiting on it returns.
func (c *Conn) Close() error { return c.f.Close() }
