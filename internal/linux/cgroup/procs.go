package cgroup

// Procs lists the pids of the processes in the group.
func (g *Group) Procs() ([]int, error) { return g.procs() }
