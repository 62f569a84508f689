package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/sandbox"
)

// Pausing a session (docs/decisions/0028): its sandbox's processes are
// frozen (sandbox.Pause) and it stays its owner's, holding its sandbox,
// its uid range and its memory, which count against the node's budget.
// Resume thaws the same processes. Nothing of one tenant is ever handed
// to another: pausing is not reuse.
//
// The clocks of a paused session:
//   - its lifetime stops: the life it had left is what it has again on
//     resume (or more, if the resume asks for more);
//   - its idle timeout stops: it is not idle, it is paused;
//   - its commands' time ceilings count running time only;
//   - the pause itself is bounded: past PausedFor (capacity.paused_for)
//     the session ends ("paused too long").

// Defaults of the paused sessions' ceilings (server.capacity).
const (
	DefaultMaxPaused = 64
	DefaultPausedFor = 24 * time.Hour
	// pauseWait bounds the wait for the kernel to freeze a sandbox: a
	// process in uninterruptible sleep (a read of a stuck NFS file) can
	// hold a freeze off for as long as it sleeps.
	pauseWait = 5 * time.Second
	// minResumedLife is the least lifetime a resumed session has.
	minResumedLife = time.Minute
)

// Pause reasons, recorded with session.paused and session.resumed.
const (
	PauseAsked   = "asked"   // a caller paused or resumed it
	PauseTimeout = "timeout" // its lifetime ran out and it pauses on timeout
	PauseTraffic = "traffic" // a call to it resumed it (E2B's autoResume)
)

var (
	// ErrPaused: a call to a paused session, which runs nothing until it
	// is resumed.
	ErrPaused = errdefs.New(errdefs.ErrConflict, "the session is paused")
	// ErrAlreadyPaused: a pause of a paused session.
	ErrAlreadyPaused = errdefs.New(errdefs.ErrConflict, "the session is paused already")
)

// Lifecycle is what a session does when its lifetime ends, and whether a
// call to it while paused resumes it. Set once, before the session is
// used (SetLifecycle).
type Lifecycle struct {
	// PauseOnTimeout pauses the session when its lifetime ends,
	// instead of ending it.
	PauseOnTimeout bool
	// AutoResume lets a call to the paused session resume it (the
	// edges that have such calls honour it: E2B's envd calls).
	AutoResume bool
}

// pausedHolds counts the paused sessions, the node's and each token's.
type pausedHolds struct {
	mu     sync.Mutex // guards all and tokens
	all    int
	tokens map[string]int
}

// holdPaused takes one of the node's paused sessions and one of tok's,
// or says which ceiling is reached. release gives them back, once.
func (n *Node) holdPaused(tok *config.Token) (release func(), err error) {
	h := &n.paused
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.all >= n.opts.MaxPaused {
		return nil, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("%d sessions are paused, the most this node allows (server.capacity.paused); resume or end one first", h.all)}
	}
	if tok != nil && tok.Paused > 0 && h.tokens[tok.Name] >= tok.Paused {
		return nil, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("token %s has %d sessions paused, the most it may (its paused); resume or end one first", tok.Name, tok.Paused)}
	}
	h.all++
	if tok != nil {
		if h.tokens == nil {
			h.tokens = map[string]int{}
		}
		h.tokens[tok.Name]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.all--
			if tok != nil {
				h.tokens[tok.Name]--
			}
		})
	}, nil
}

// Paused is how many sessions the node holds paused.
func (n *Node) Paused() int {
	n.paused.mu.Lock()
	defer n.paused.mu.Unlock()
	return n.paused.all
}

// SetLifecycle sets what s does when its lifetime ends; before s is used.
func (s *Session) SetLifecycle(l Lifecycle) {
	s.mu.Lock()
	s.lifecycle = l
	s.mu.Unlock()
}

// Lifecycle is what s does when its lifetime ends.
func (s *Session) Lifecycle() Lifecycle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lifecycle
}

// Paused reports whether s is paused.
func (s *Session) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// EnterError is why Enter refused a call: the session has ended, or is
// paused.
func (s *Session) EnterError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errdefs.Errorf(errdefs.ErrConflict, "session %s has ended (%s)", s.id, s.endReason)
	}
	if s.dormant {
		return dormantError(s)
	}
	if s.paused {
		return fmt.Errorf("%w: session %s was paused %s; resume it first", ErrPaused, s.id, s.pausedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// Pause pauses session s for client (recorded as who asked, with
// reason): its processes frozen, its clocks stopped. Calls in flight are
// not ended: they stand still with its processes. A paused session is
// ErrAlreadyPaused; an ended one, or one whose sandbox would not freeze,
// is refused and left as it was. Past the node's or the owner's token's
// ceiling of paused sessions it is refused, naming the ceiling.
func (n *Node) Pause(ctx context.Context, s *Session, client, reason string) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if err := s.EnterError(); err != nil {
		if s.Paused() {
			return ErrAlreadyPaused
		}
		return err
	}
	release, err := n.holdPaused(s.token)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseWait)
	err = s.sb.Pause(fctx)
	cancel()
	if err != nil {
		release()
		if !alive(s.sb) {
			return errdefs.Errorf(errdefs.ErrConflict, "session %s has ended: its sandbox is gone", s.id)
		}
		n.opts.Logger.Warn("pause failed", "session", s.id, "err", err)
		return errdefs.Errorf(errdefs.ErrUnavailable, "session %s could not be paused: a process of it would not stop in %s (one in uninterruptible sleep); it goes on running", s.id, pauseWait)
	}
	now := time.Now()
	s.mu.Lock()
	left := max(0, s.expires.Sub(now))
	s.paused, s.pausedAt, s.lifeLeft, s.unpause = true, now, left, release
	s.pauseGen++
	gen := s.pauseGen
	s.mu.Unlock()
	// Its files are kept in the background, for a restart of the
	// daemon (dormant.go): the pause does not wait for them.
	n.keeping.Add(1)
	go func() {
		defer n.keeping.Done()
		n.keepFiles(s, gen)
	}()
	e := s.auditScope().event(audit.KindSessionPaused)
	e.Client = client
	e.Detail = audit.Detail(map[string]string{"reason": reason, "life_left": left.Round(time.Second).String()})
	n.audit.Record(e)
	return nil
}

// Resume resumes paused session s for client: the same processes run on,
// and its lifetime is what it had left when paused, or life from now if
// that is longer (and a minute at least). resumed is false when s was
// not paused (nothing is done then, and nothing recorded). A dormant
// session (dormant.go) is refused: ResumeFromFiles resumes it.
func (n *Node) Resume(ctx context.Context, s *Session, client, reason string, life time.Duration) (resumed bool, err error) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	ended, paused, dormant := s.ended, s.paused, s.dormant
	s.mu.Unlock()
	switch {
	case ended:
		return false, s.EnterError()
	case dormant:
		return false, dormantError(s)
	case !paused:
		return false, nil
	}
	if err := s.sb.Resume(); err != nil {
		n.opts.Logger.Warn("resume failed", "session", s.id, "err", err)
		return false, errdefs.Errorf(errdefs.ErrUnavailable, "session %s could not be resumed; see the daemon's log", s.id)
	}
	now := time.Now()
	s.mu.Lock()
	pausedFor := now.Sub(s.pausedAt)
	// At least a minute: a session paused as its lifetime ran out has
	// none left, and would pause again at once.
	s.expires = now.Add(max(s.lifeLeft, life, minResumedLife))
	s.lastUsed = now
	release := s.unpause
	s.paused, s.unpause = false, nil
	s.mu.Unlock()
	release()
	n.dropKept(s)
	e := s.auditScope().event(audit.KindSessionResumed)
	e.Client = client
	e.Detail = audit.Detail(map[string]string{"reason": reason, "paused_for": pausedFor.Round(time.Millisecond).String()})
	n.audit.Record(e)
	return true, nil
}

// pauseOnTimeout pauses s, whose lifetime has run out, or ends it when it
// cannot be paused (a ceiling of paused sessions reached), saying why.
func (n *Node) pauseOnTimeout(ctx context.Context, s *Session) {
	if err := n.Pause(ctx, s, s.auditScope().client, PauseTimeout); err != nil && !errors.Is(err, ErrAlreadyPaused) {
		_ = s.End(ctx, "max lifetime (not paused: "+err.Error()+")")
	}
}

// Usage is what the node's live sandboxes reserve now, the paused ones
// among them.
func (n *Node) Usage() sandbox.Usage { return n.rt.Usage() }

// Budget is the node's capacity (server.capacity, under its cgroups'
// own limits): what Usage is held to.
func (n *Node) Budget() sandbox.Budget { return n.opts.Sandbox.Budget }
