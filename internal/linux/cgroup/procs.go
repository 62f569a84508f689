package cgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Procs lists the pids of the processes directly in the group (not in
// child groups), reading cgroup.procs itself: cheap enough for a monitor
// that polls every few milliseconds. Kill lists the processes of nested
// groups too. A group that is gone has no processes.
func (g *Group) Procs() ([]int, error) {
	dir := g.dirs[0]
	if g.p.version == V1 {
		dir = g.dirs[g.p.v1.idx[ctrlMemory]]
	}
	// Opened anew each time: on v1 the kernel serves a kept descriptor a
	// cached pid list for up to a second.
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	return parsePids(data), nil
}

// parsePids reads one pid per line, skipping anything else.
func parsePids(data []byte) []int {
	var pids []int
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		if pid, err := strconv.Atoi(string(bytes.TrimSpace(line))); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

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
