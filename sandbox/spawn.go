package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/spawner"
	"golang.org/x/sys/unix"
)

// spawnerClient talks to the runtime's spawner process, starting it on
// first use and again after it died.
type spawnerClient struct {
	initPath string
	cg       *cgroup.Parent

	// mu guards proc, conn, next and release. It is held for a whole
	// request, so one request at a time is on the socket and the next
	// message read is its reply.
	mu   sync.Mutex
	proc *os.Process
	conn *seqConn
	next uint64
	// release ends the thread the spawner was started from.
	release chan struct{}
}

// start launches the spawner. The caller holds c.mu.
func (c *spawnerClient) start() error {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spawner socket: %w", err)
	}
	ours, theirs := pair[0], os.NewFile(uintptr(pair[1]), "spawner-child")
	// The spawner and every init (cloned as our children) get SIGKILL
	// when the thread that started the spawner exits. That thread is
	// therefore reserved: locked, parked, and released only when the
	// spawner is stopped, so only the death of this process fires it.
	type started struct {
		p   *os.Process
		err error
	}
	res := make(chan started)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		files := []*os.File{nil, os.Stderr, os.Stderr, theirs}
		cfg := spawner.Config{Version: initproto.Version}
		// How many v1 tasks files each request carries.
		cfg.Hierarchies = c.cg.Hierarchies()
		p, err := os.StartProcess(c.initPath, []string{spawner.Arg0, cfg.String()}, &os.ProcAttr{
			Env:   []string{"GOMAXPROCS=1"},
			Files: files,
			// Its own process group: a terminal's ^C goes to airlock,
			// which then destroys its sandboxes in order.
			Sys: &unix.SysProcAttr{Pdeathsig: unix.SIGKILL, Setpgid: true},
		})
		res <- started{p, err}
		<-release
		runtime.UnlockOSThread()
	}()
	r := <-res
	// Only the spawner holds its end now: its death is an end of file.
	theirs.Close()
	p, err := r.p, r.err
	if err != nil {
		close(release)
	} else {
		c.release = release
	}
	if err != nil {
		unix.Close(ours)
		return fmt.Errorf("start spawner: %w", err)
	}
	conn, err := newSeqConn(ours)
	if err != nil {
		_ = p.Kill()
		_, _ = p.Wait()
		close(release)
		c.release = nil
		return fmt.Errorf("spawner socket: %w", err)
	}
	c.proc, c.conn = p, conn
	if err := c.hello(); err != nil {
		c.stop()
		return err
	}
	return nil
}

// hello reads the spawner's first message and checks that it speaks this
// build's protocol.
func (c *spawnerClient) hello() error {
	_ = c.conn.SetReadDeadline(time.Now().Add(helloTimeout))
	defer c.conn.SetReadDeadline(time.Time{})
	buf := make([]byte, 512)
	n, _, err := c.conn.readMsg(buf, nil)
	var h spawner.Hello
	if err != nil || n == 0 || h.Unmarshal(buf[:n]) != nil {
		return fmt.Errorf("%s did not start as airlock's spawner (is it airlock-init?)", c.initPath)
	}
	if h.Version != initproto.Version {
		return fmt.Errorf("%w: %s speaks protocol %d, this airlock %d; install both from one build", initproto.ErrVersion, c.initPath, h.Version, initproto.Version)
	}
	return nil
}

// helloTimeout bounds the spawner's start.
const helloTimeout = 10 * time.Second

// stop ends the spawner; inits it cloned die with it. The caller holds c.mu.
func (c *spawnerClient) stop() {
	if c.proc == nil {
		return
	}
	_ = c.conn.Close()
	_ = c.proc.Kill()
	_, _ = c.proc.Wait()
	close(c.release)
	c.proc, c.conn, c.release = nil, nil, nil
}

// Close stops the spawner.
func (c *spawnerClient) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop()
}

// spawn asks for one init and returns its pid and a pidfd.
func (c *spawnerClient) spawn(req spawner.Request, fds []int) (pid int, pidfd *os.File, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		if err := c.start(); err != nil {
			return 0, nil, err
		}
	}
	c.next++
	req.ID = c.next
	b := req.Marshal()
	if err := c.conn.writeMsg(b, unix.UnixRights(fds...)); err != nil {
		// The spawner died since the last request; a new one gets it.
		c.stop()
		if err := c.start(); err != nil {
			return 0, nil, err
		}
		if err := c.conn.writeMsg(b, unix.UnixRights(fds...)); err != nil {
			c.stop()
			return 0, nil, fmt.Errorf("spawner: %w", err)
		}
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, err := c.conn.readMsg(buf, oob)
	if err != nil || n == 0 {
		c.stop()
		return 0, nil, errors.Join(errors.New("spawner died"), err)
	}
	var got []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if r, err := unix.ParseUnixRights(&m); err == nil {
				got = append(got, r...)
			}
		}
	}
	var reply spawner.Reply
	if err := reply.Unmarshal(buf[:n]); err != nil || reply.ID != req.ID {
		for _, fd := range got {
			unix.Close(fd)
		}
		c.stop()
		return 0, nil, fmt.Errorf("spawner: bad reply %q", buf[:n])
	}
	if reply.Error != "" || len(got) != 1 {
		for _, fd := range got {
			// An init that failed after the clone was killed by the
			// spawner, and is ours to reap (CLONE_PARENT).
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			var info unix.Siginfo
			for unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED, nil) == unix.EINTR {
			}
			unix.Close(fd)
		}
		if reply.Error == "" {
			reply.Error = "no pidfd in reply"
		}
		return 0, nil, fmt.Errorf("spawner: %s", reply.Error)
	}
	pidfd, err = pidFile(got[0])
	return reply.Pid, pidfd, err
}

// seqConn is a SOCK_SEQPACKET unix socket served by the runtime's poller:
// what net.UnixConn would do for it, without linking the net package (its
// initialisers run in every airlock process).
type seqConn struct {
	f  *os.File
	rc syscall.RawConn
}

// newSeqConn takes over the socket fd, which it makes non-blocking.
func newSeqConn(fd int) (*seqConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "spawner")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &seqConn{f: f, rc: rc}, nil
}

// writeMsg sends one message with its control data.
func (c *seqConn) writeMsg(b, oob []byte) error {
	var err error
	werr := c.rc.Write(func(fd uintptr) bool {
		err = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return err != unix.EAGAIN
	})
	return errors.Join(werr, err)
}

// readMsg receives one message; n and oobn are both 0 at the peer's end.
func (c *seqConn) readMsg(b, oob []byte) (n, oobn int, err error) {
	rerr := c.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, err = unix.Recvmsg(int(fd), b, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	})
	if rerr != nil {
		return 0, 0, rerr
	}
	return n, oobn, err
}

func (c *seqConn) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

func (c *seqConn) Close() error { return c.f.Close() }

// pidFile wraps a pidfd, non-blocking, so that waiting for init's exit parks
// a goroutine in the runtime's poller instead of holding a thread.
func pidFile(fd int) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}
