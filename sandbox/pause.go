package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Pausing: a paused sandbox's processes are frozen by its cgroup (the v1
// freezer, v2's cgroup.freeze), so none of them runs or takes CPU, and
// nothing is lost: its memory stays charged to its group, and its
// ceilings stay booked in the runtime's ledger, which counts it as paused
// (Usage). Resume thaws the same processes.
//
// The clocks: an exec's time ceiling counts the time the sandbox ran,
// not the time it was paused (a command paused for an hour is not killed
// for it when it resumes). CPU time stops by itself.

// ErrPaused is wrapped by the error of what a paused sandbox cannot do.
var ErrPaused = errdefs.New(errdefs.ErrConflict, "the sandbox is paused")

// pauseClock keeps how long a sandbox has been paused in all.
type pauseClock struct {
	at    time.Time     // when the current pause began; zero when running
	total time.Duration // the pauses before the current one
}

// pausedFor is the time paused in all up to now.
func (c pauseClock) pausedFor(now time.Time) time.Duration {
	if c.at.IsZero() {
		return c.total
	}
	return c.total + now.Sub(c.at)
}

// Pause freezes every process of the sandbox, waiting, bounded by ctx,
// until the kernel reports them all frozen. A sandbox that does not
// freeze in time is left running, and the error says so. Pausing a
// paused sandbox does nothing.
func (s *Sandbox) Pause(ctx context.Context) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	paused, killed := s.frozen, s.killed
	s.mu.Unlock()
	switch {
	case paused:
		return nil
	case killed:
		return ErrDead
	}
	if err := s.group.Freeze(ctx); err != nil {
		return fmt.Errorf("sandbox %s: pause: %w", s.id, err)
	}
	s.mu.Lock()
	// Checked with the freeze done, under the lock kill takes: either
	// kill sees frozen and thaws what it killed, or this sees killed and
	// thaws; a killed init never stays frozen (on v1 it would not die).
	killed = s.killed
	if !killed {
		s.frozen = true
		s.pauses.at = time.Now()
	}
	s.mu.Unlock()
	if killed {
		_ = s.group.Thaw()
		return ErrDead
	}
	s.rt.ledger.pause(s.limits)
	return nil
}

// Resume lets the processes Pause froze run again. Resuming a sandbox
// that is not paused does nothing.
func (s *Sandbox) Resume() error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	paused := s.frozen
	s.mu.Unlock()
	if !paused {
		return nil
	}
	if err := s.group.Thaw(); err != nil {
		return fmt.Errorf("sandbox %s: resume: %w", s.id, err)
	}
	s.unfreeze()
	return nil
}

// unfreeze ends the sandbox's pause in its clock and in the ledger, once.
func (s *Sandbox) unfreeze() {
	s.mu.Lock()
	was := s.frozen
	if was {
		s.frozen = false
		s.pauses.total = s.pauses.pausedFor(time.Now())
		s.pauses.at = time.Time{}
	}
	s.mu.Unlock()
	if was {
		s.rt.ledger.unpause(s.limits)
	}
}

// Paused reports whether the sandbox is paused.
func (s *Sandbox) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen
}

// pausedFor is how long the sandbox has been paused in all, up to now.
func (s *Sandbox) pausedFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pauses.pausedFor(time.Now())
}
