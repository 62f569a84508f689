package sbinit

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/initproto"
)

// relay is a command's terminal under gVisor, which sends no descriptor
// of the guest's to the host: init keeps the terminal's master side and
// copies between it and the host's pipes, what is typed from in and what
// the terminal shows to out. It runs on goroutines of its own (two per
// terminal), the one place init has any: their reads block, and init's
// loop must not.
//
// The command's exit goes to the host once what the terminal showed
// before it has gone out (see exited): the host ends a sandbox made for
// one command at its exit, init with it.
type relay struct {
	in, out *os.File
	// master is the terminal's master side, run's; typing is its
	// duplicate, typed's. Each closes its own: a descriptor closed by
	// one goroutine while the other uses it could be another of init's
	// by then. Both are non-blocking (one open file), and each waits
	// in poll, so a copy never holds for good on a terminal whose
	// command has ended.
	master, typing int
	// wake is an eventfd that exited writes to, so that the copy, which
	// waits in poll for the terminal's output, looks at the exit at once.
	wake int

	// mu guards the rest: master's closing against a resize on init's
	// loop, and the exit message between init's loop and the copy.
	mu sync.Mutex
	// closed is set once master is closed; done once the copy is over.
	closed, done bool
	// exit is the command's exit message, held until the terminal's
	// output before it is out; sent once it has been.
	exit *initproto.Message
	sent bool
	// hostGone is set once the host's end of in has closed, which it
	// does when the command's exec has ended: the terminal is then hung
	// up, as the host does with a terminal it holds.
	hostGone bool
}

// relayPoll is how often a write into a full terminal looks whether the
// terminal's output is over (and with it, the terminal).
const relayPoll = 20 // milliseconds

// newRelay makes the relay of the terminal whose master side is master
// (which it then owns, as in and out) for the pipes in and out.
func newRelay(master, in, out int) (*relay, error) {
	r := &relay{master: master, typing: -1, wake: -1, in: os.NewFile(uintptr(in), "typed"), out: os.NewFile(uintptr(out), "shown")}
	fd, err := unix.FcntlInt(uintptr(master), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		r.typing = fd
		r.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	}
	if err == nil {
		err = unix.SetNonblock(master, true)
	}
	if err != nil {
		r.in.Close()
		r.out.Close()
		for _, fd := range []int{master, r.typing, r.wake} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil, err
	}
	return r, nil
}

// run copies until the terminal has nothing more to show (every process
// holding its other side has ended, and a read of the master side fails)
// or the host has stopped reading. What is typed is copied as long as the
// host types and the terminal takes it; the host's end of in closes with
// the command's exec.
func (r *relay) run() {
	go r.typed()
	buf := make([]byte, 16<<10)
	fds := []unix.PollFd{{Fd: int32(r.master), Events: unix.POLLIN}, {Fd: int32(r.wake), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err != nil && err != unix.EINTR {
			break
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(r.wake, b[:])
		}
		if n > 0 && fds[0].Revents != 0 {
			k, err := unix.Read(r.master, buf)
			if k > 0 {
				if _, werr := r.out.Write(buf[:k]); werr != nil {
					break // the host stopped reading
				}
			}
			// The terminal's other side is closed once no process holds
			// it: Linux then fails the read (EIO) once the output is
			// taken, gVisor says it would block, with POLLHUP set.
			hup := fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
			if k <= 0 && (hup || err != unix.EINTR && err != unix.EAGAIN) {
				break
			}
		}
		r.sendExitIfShown()
		r.mu.Lock()
		over := r.hostGone && r.sent
		r.mu.Unlock()
		if over {
			// The master side's close takes the terminal out of
			// /dev/pts and ends the relay. gVisor signals nothing
			// then (init did, at the command's exit: see reap), and
			// a process still holding the terminal may go on
			// writing into it, read by nobody.
			break
		}
	}
	r.out.Close()
	r.mu.Lock()
	r.done, r.closed = true, true
	unix.Close(r.master)
	unix.Close(r.wake)
	m := r.exitToSend()
	r.mu.Unlock()
	send(m)
}

// typed copies what the host types into the terminal, until the host
// stops typing (its end of in closes with the command's exec, and the
// copy is then told) or the terminal is gone.
func (r *relay) typed() {
	defer r.in.Close()
	defer unix.Close(r.typing)
	buf := make([]byte, 4096)
	for {
		n, err := r.in.Read(buf)
		if n > 0 && !r.write(buf[:n]) {
			return
		}
		if err != nil {
			r.mu.Lock()
			r.hostGone = true
			r.poke()
			r.mu.Unlock()
			return
		}
	}
}

// write writes b to the terminal, waiting while the terminal takes no
// more (its command reads nothing) until the copy of its output is over.
func (r *relay) write(b []byte) bool {
	fds := []unix.PollFd{{Fd: int32(r.typing), Events: unix.POLLOUT}}
	for len(b) > 0 {
		r.mu.Lock()
		done := r.done
		r.mu.Unlock()
		if done {
			return false
		}
		if _, err := unix.Poll(fds, relayPoll); err != nil && err != unix.EINTR {
			return false
		}
		n, err := unix.Write(r.typing, b)
		if n > 0 {
			b = b[n:]
		}
		if err != nil && err != unix.EAGAIN && err != unix.EINTR {
			return false
		}
	}
	return true
}

// exited takes the command's exit message, from init's loop: sent at
// once if the copy is over, else by the copy once it has shown what the
// terminal held.
func (r *relay) exited(m *initproto.Message) {
	r.mu.Lock()
	r.exit = m
	if r.poke() {
		r.mu.Unlock()
		return
	}
	m = r.exitToSend()
	r.mu.Unlock()
	send(m)
}

// poke wakes the copy, if it is not done, and says whether it was not;
// under mu (the copy closes wake only once done, under mu).
func (r *relay) poke() bool {
	if r.done {
		return false
	}
	_, _ = unix.Write(r.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	return true
}

// sendExitIfShown sends the exit message once the terminal holds no
// output the copy has not taken.
func (r *relay) sendExitIfShown() {
	r.mu.Lock()
	if r.exit == nil || r.sent {
		r.mu.Unlock()
		return
	}
	if n, err := unix.IoctlGetInt(r.master, unix.TIOCINQ); err == nil && n > 0 {
		r.mu.Unlock()
		return
	}
	m := r.exitToSend()
	r.mu.Unlock()
	send(m)
}

// exitToSend returns the exit message if it is held and not yet sent,
// and marks it sent; under mu.
func (r *relay) exitToSend() *initproto.Message {
	if r.exit == nil || r.sent {
		return nil
	}
	r.sent = true
	return r.exit
}

func send(m *initproto.Message) {
	if m != nil {
		_ = initproto.Send(ctrlFD, m, nil)
	}
}

// resize sets the terminal's window size; the guest kernel signals
// SIGWINCH to its foreground process group.
func (r *relay) resize(rows, cols uint16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		_ = unix.IoctlSetWinsize(r.master, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
}
