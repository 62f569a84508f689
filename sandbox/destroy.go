package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/airlockhq/airlock/internal/initproto"
	"golang.org/x/sys/unix"
)

// destroyTimeout bounds teardown when the caller's context has no deadline.
const destroyTimeout = 30 * time.Second

// readLoop routes init's messages to the exec waiting for them. When the
// channel ends, init is gone and every waiter is released.
func (s *Sandbox) readLoop() {
	defer s.releaseWaiters()
	for {
		m, f, err := s.conn.Recv()
		if err != nil {
			return
		}
		if m.Kind == initproto.KindDescriptors && s.gv != nil {
			closeFile(f)
			s.gv.noteDescriptors(m.Count, s.ceilings().FDs)
			continue
		}
		if m.Kind != initproto.KindStarted && m.Kind != initproto.KindExit {
			closeFile(f)
			continue // init has nothing else to say after ready
		}
		s.mu.Lock()
		ch := s.waiters[m.ID]
		s.mu.Unlock()
		if ch == nil {
			closeFile(f)
			continue
		}
		select {
		case ch <- initReply{m: m, pty: f}:
		default:
			// A waiter holds at most a started and an exit message; a
			// misbehaving init cannot block the loop.
			closeFile(f)
		}
	}
}

// releaseWaiters marks the sandbox dead (init gone) and releases every
// exec waiting for a message.
func (s *Sandbox) releaseWaiters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.dead)
	for id, ch := range s.waiters {
		close(ch)
		delete(s.waiters, id)
	}
}

// deathCause is what an exec whose sandbox ended under it is told: what
// ended a one-command gVisor sandbox's command when runsc said nothing of
// it, or ErrDead.
func (s *Sandbox) deathCause() error {
	if s.gv != nil && s.gv.exitErr != nil {
		return s.gv.exitErr
	}
	return ErrDead
}

// initReply is one message from init for an exec, with the terminal's
// master side when it carried one (see initproto.Conn.Recv).
type initReply struct {
	m   *initproto.Message
	pty *os.File
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// kill destroys every process of the sandbox at once. Killing init makes
// the kernel kill everything else in its pid namespace, including stopped
// processes and processes that ignore signals, and refuse new forks while
// it does so.
func (s *Sandbox) kill() {
	s.mu.Lock()
	s.killed = true
	frozen := s.frozen
	s.mu.Unlock()
	select {
	case <-s.exited:
		// Init (runsc) has exited and been reaped: its pid namespace is
		// empty (runsc reaps its sandbox before it exits); what a killed
		// runsc left is the teardown's (the cgroup's kill).
		return
	default:
	}
	if s.gv != nil {
		s.killGVisor()
	} else if s.pidfd != nil {
		// The pidfd names this init even if its pid were reused.
		if rc, err := s.pidfd.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0)
			})
		}
	}
	if frozen {
		// A paused sandbox is thawed once killed: its processes then
		// die of the SIGKILL pending, running nothing else (a v1
		// frozen task would not die at all).
		_ = s.group.Thaw()
	}
}

// Destroy kills everything in the sandbox and removes every trace of it:
// processes, cgroup, network namespace, mounts (they die with the mount
// namespace), lock files. It is safe to call more than once.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroy.Do(func() {
		// A one-shot runtime's sweep, started with this sandbox, is
		// over first, so that it never meets this sandbox half gone.
		s.rt.sweeping.Wait()
		s.kill()
		// Execs in flight end with init; the teardown closes what they
		// read, so it waits for them (bounded: a stuck one cannot hold
		// the destroy).
		ended := make(chan struct{})
		go func() {
			s.execs.Wait()
			close(ended)
		}()
		select {
		case <-ended:
		case <-time.After(destroyTimeout):
			s.rt.opts.Logger.Warn("destroy: an exec did not end with its sandbox", "sandbox", s.id)
		}
		s.destroyE = s.teardown(context.WithoutCancel(ctx))
		s.rt.observe(Lifecycle{Event: Destroyed, ID: s.id, Label: s.label, Err: s.destroyE})
		close(s.gone)
	})
	return s.destroyE
}

// teardown releases whatever has been built, in reverse order. It is also
// the undo of a failed Create.
func (s *Sandbox) teardown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	var errs []error
	s.abandonLaunch()
	if s.pidfd != nil {
		s.kill()
		// A failed Create may not have asked yet; the answer comes
		// once the killed init has let go of this process's memory.
		_ = s.initExecd()
		if s.gv != nil {
			s.awaitRunsc(ctx)
		}
		select {
		case <-s.exited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("sandbox %s: init did not exit: %w", s.id, ctx.Err()))
		}
		_ = s.pidfd.Close()
		s.pidfd = nil
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.initLog != nil {
		_ = s.initLog.Close()
	}
	if s.scratch >= 0 {
		_ = unix.Close(s.scratch)
		s.scratch = -1
	}
	if s.upper >= 0 {
		_ = unix.Close(s.upper)
		s.upper = -1
	}
	s.closeVolumes()
	if s.group != nil && !s.group.TryDelete() {
		// Init's death normally leaves the cgroup empty, and the first
		// try removes it (the kernel refuses while a task is left, so
		// no check comes first); Kill is the backstop that freezes and
		// kills anything still there.
		if pop, err := s.group.Populated(); err != nil || pop {
			errs = append(errs, s.group.Kill(ctx))
		}
		errs = append(errs, s.group.Delete(ctx))
	}
	if s.netns != nil {
		errs = append(errs, s.netns.Close())
		s.netns = nil
	}
	errs = append(errs, s.removeBundle())
	if s.imageLock != nil {
		_ = s.imageLock.Close()
		s.imageLock = nil
	}
	if s.seedLock != nil {
		_ = s.seedLock.Close()
		s.seedLock = nil
	}
	if s.ids != nil {
		errs = append(errs, s.ids.release())
		s.ids = nil
	}
	// The lock goes last: until it is released, a sweeper leaves the
	// cgroup alone.
	errs = append(errs, s.lock.release())
	s.lock = nil
	s.unfreeze()
	if s.booked {
		s.rt.ledger.give(s.limits)
		s.booked = false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.id, err)
	}
	return nil
}
