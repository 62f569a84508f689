package cgroup

import "golang.org/x/sys/unix"

// Procs lists the pids of the processes in the group.
func (g *Group) Procs() ([]int, error) { return g.procs() }

// Close releases the descriptors the Parent keeps. Groups created from it
// stay valid; a later EnterThread reopens what it needs.
func (p *Parent) Close() error {
	p.retMu.Lock()
	defer p.retMu.Unlock()
	for f, fd := range p.retFDs {
		unix.Close(fd)
		delete(p.retFDs, f)
	}
	return nil
}
