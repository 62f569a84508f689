package sandbox

import (
	"os"
	"sync"

	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/linux/netns"
)

// prepNetns is how many fresh network namespaces a runtime keeps made
// ahead of demand. Making one (unshare, bring lo up) is a third of a
// millisecond of kernel work that policy never depends on, so it is done
// on another thread, and a Create on an otherwise idle machine does not
// wait for it. A namespace is never reused: each is handed to one sandbox,
// or closed unused when the runtime closes.
const prepNetns = 2

// netnsSupply keeps up to prepNetns namespaces ready.
type netnsSupply struct {
	ready chan *os.File
	kick  chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup
	// pending, in a supply of one (newNetnsOne) made by a goroutine, is
	// closed once the one namespace is made or has failed.
	pending chan struct{}

	// mu guards child, which a take and close may both claim.
	mu sync.Mutex
	// child, in a supply of one made by a child process, is that child
	// until the namespace is taken.
	child *forkexec.NetnsChild
}

// newNetnsOne makes a single namespace on another thread at once, for a
// runtime that creates one sandbox (OneShot): making it overlaps
// the rest of the runtime's start and the sandbox's preparation, and
// nothing is made that goes unused. Its first take waits for that one;
// later takes make their own.
func newNetnsOne() *netnsSupply {
	s := &netnsSupply{
		ready: make(chan *os.File, 1),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	// A child process makes it where one can run on this process's
	// memory: it runs at once, alongside. A goroutine would start only
	// once this process blocks, which a one-shot run does when it needs
	// the namespace, so the namespace would be made then, not meanwhile
	// (a wait of 0.5–0.7 ms in every airlock run, 0.07–0.16 now).
	if forkexec.SharesMemory() {
		if c, err := forkexec.StartNetns(); err == nil {
			s.child = c
			return s
		} // else a goroutine makes it
	}
	s.pending = make(chan struct{})
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		defer close(s.pending)
		if ns, err := netns.New(); err == nil {
			s.ready <- ns // room for one: never blocks
		} // else the take makes its own, and reports why it cannot
	}()
	return s
}

// newNetnsSupply keeps n namespaces ready; with 0 every take makes one.
func newNetnsSupply(n int) *netnsSupply {
	s := &netnsSupply{
		ready: make(chan *os.File, n),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	if n > 0 {
		s.done.Add(1)
		go s.fill()
		s.kick <- struct{}{}
	}
	return s
}

// take returns a fresh namespace: one made ahead if there is one, else a
// new one now.
func (s *netnsSupply) take() (*os.File, error) {
	if c := s.takeChild(); c != nil {
		if ns, err := c.Wait(); err == nil {
			return ns, nil
		} // else make one here, and report why that cannot be done
		return netns.New()
	}
	if s.pending != nil {
		<-s.pending
	}
	select {
	case ns := <-s.ready:
		select {
		case s.kick <- struct{}{}:
		default:
		}
		return ns, nil
	default:
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return netns.New()
}

func (s *netnsSupply) fill() {
	defer s.done.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		for len(s.ready) < cap(s.ready) {
			ns, err := netns.New()
			if err != nil {
				break // Create makes its own, and reports why it cannot
			}
			select {
			case s.ready <- ns:
			case <-s.stop:
				ns.Close()
				return
			}
		}
	}
}

// takeChild returns the child making the supply's namespace, once.
func (s *netnsSupply) takeChild() *forkexec.NetnsChild {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.child
	s.child = nil
	return c
}

// close stops the supply and closes the namespaces nobody took.
func (s *netnsSupply) close() {
	if c := s.takeChild(); c != nil {
		if ns, err := c.Wait(); err == nil {
			ns.Close()
		}
	}
	close(s.stop)
	s.done.Wait()
	for {
		select {
		case ns := <-s.ready:
			ns.Close()
		default:
			return
		}
	}
}
