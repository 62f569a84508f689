package sandbox

import (
	"github.com/airlockhq/airlock/internal/linux/netns"
)

// InNetNS calls fn on an OS thread inside the sandbox's network
// namespace, while the sandbox lives (its namespace is not closed under
// fn), so that the sockets fn makes are the sandbox's: a connection to
// one of its ports (the E2B API's sandbox ports) reaches what listens on
// its own loopback, and nothing of the host's or another sandbox's. fn
// must not start goroutines that make sockets (netns.Do). A socket fn
// made stays usable when InNetNS returns, until either end closes it or
// the sandbox is destroyed.
func (s *Sandbox) InNetNS(fn func() error) error {
	s.mu.Lock()
	if s.killed || s.netns == nil {
		s.mu.Unlock()
		return ErrDead
	}
	s.execs.Add(1)
	ns := s.netns
	s.mu.Unlock()
	defer s.execs.Done()
	return netns.Do(ns, fn)
}
