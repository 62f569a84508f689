package sandbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
)

// prepGroups bounds the sandbox cgroups a runtime keeps made ahead of
// demand: one for each of the last few limits Start was given (a daemon's
// tools differ in limits, and its pools refill them in turn), each with
// its sandbox id claimed (the id's lock file held) and its counter files
// open. Making one is a fifth of a millisecond of kernel work on cgroup v1
// (a directory, limit files and descriptors in each of five hierarchies)
// that depends on nothing but the limits, so it is done while the
// previous sandbox runs, and a Start on an otherwise idle machine does not
// wait for it. A group is never reused: each goes to one sandbox, or is
// removed unused (the oldest, when limits beyond these are wanted; all at
// the runtime's Close). Nothing runs in a prepared group, so its counters
// start at zero as a new group's do.
const prepGroups = 3

// preparedGroup is one sandbox's cgroup made ahead.
type preparedGroup struct {
	id     string
	lock   *lockFile
	group  *cgroup.Group
	limits cgroup.Limits
}

// groupSupply keeps a group ready for the limits of each of the latest
// takes, up to prepGroups: after a take it makes the next for the limits
// taken, unless one is ready for them.
type groupSupply struct {
	lockDir string
	cg      *cgroup.Parent
	max     int
	kick    chan struct{}
	stop    chan struct{}
	done    sync.WaitGroup

	// mu guards ready, want, wanted and owned: take, the filler and the
	// census run on different goroutines.
	mu     sync.Mutex
	ready  []*preparedGroup // oldest first
	want   cgroup.Limits
	wanted bool     // a take has said which limits
	owned  []string // ids being made or ready, for the tests' census
}

func newGroupSupply(lockDir string, cg *cgroup.Parent, n int) *groupSupply {
	s := &groupSupply{
		lockDir: lockDir,
		cg:      cg,
		max:     n,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	s.done.Add(1)
	go s.fill()
	return s
}

// take returns a prepared group with limits l, or nil when there is none
// (the caller makes its own). The supply then makes the next with l.
func (s *groupSupply) take(l cgroup.Limits) *preparedGroup {
	var p *preparedGroup
	s.mu.Lock()
	s.want, s.wanted = l, true
	for i, r := range s.ready {
		if r.limits == l {
			p = r
			s.ready = slices.Delete(s.ready, i, i+1)
			break
		}
	}
	s.mu.Unlock()
	if p != nil {
		s.disown(p.id)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return p
}

func (s *groupSupply) fill() {
	defer s.done.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		s.mu.Lock()
		l, ok := s.want, s.wanted
		for _, r := range s.ready {
			if r.limits == l {
				ok = false // one is ready for them
			}
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		p, err := s.make(l)
		if err != nil {
			continue // Start makes its own, and reports why it cannot
		}
		var old *preparedGroup
		s.mu.Lock()
		s.ready = append(s.ready, p)
		if len(s.ready) > s.max {
			old = s.ready[0]
			s.ready = slices.Delete(s.ready, 0, 1)
		}
		s.mu.Unlock()
		if old != nil {
			s.disown(old.id)
			s.remove(old)
		}
	}
}

// make claims a new sandbox id and makes its cgroup, as Start does: the
// lock file first, so that a sweeper never takes the group for a
// leftover.
func (s *groupSupply) make(l cgroup.Limits) (*preparedGroup, error) {
	id := newID()
	s.mu.Lock()
	s.owned = append(s.owned, id)
	s.mu.Unlock()
	lock, err := claimNew(s.lockDir + "/" + id)
	if err != nil || lock == nil {
		s.disown(id)
		return nil, errors.Join(errors.New("claim sandbox id"), err)
	}
	g, err := s.cg.Create(id, l)
	if err == nil {
		if err = g.OpenCounters(); err != nil {
			_ = g.Close()
			err = errors.Join(err, g.Delete(context.Background()))
		}
	}
	if err != nil {
		s.disown(id)
		return nil, errors.Join(err, lock.release())
	}
	return &preparedGroup{id: id, lock: lock, group: g, limits: l}, nil
}

// remove deletes a prepared group nobody will use, then its lock.
func (s *groupSupply) remove(p *preparedGroup) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.group.Delete(ctx)
	_ = p.lock.release()
}

func (s *groupSupply) disown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.owned, id); i >= 0 {
		s.owned = slices.Delete(s.owned, i, i+1)
	}
}

// readyIDs lists the ids of the groups ready, oldest first.
func (s *groupSupply) readyIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.ready))
	for i, r := range s.ready {
		ids[i] = r.id
	}
	return ids
}

// ids lists the ids of the groups the supply holds or is making.
func (s *groupSupply) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.owned)
}

// close stops the supply and removes the groups nobody took.
func (s *groupSupply) close() {
	close(s.stop)
	s.done.Wait()
	s.mu.Lock()
	ready := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, p := range ready {
		s.disown(p.id)
		s.remove(p)
	}
}
