package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The files a Group keeps open. The first numCounterFiles feed Counters;
// the last one feeds Populated.
const (
	fMemory = iota
	fMemoryPeak
	fOOM
	fPids
	fPidsPeak
	fPidsEvents
	fCPU
	numCounterFiles
	fPopulated = numCounterFiles
	numFiles   = numCounterFiles + 1
)

// Descriptor states besides a real fd.
const (
	fdUnopened = -2 // not opened yet: opened on first use
	fdAbsent   = -1 // the kernel has no such file (optional); reads as 0
)

// fileSpec says where one counter lives and how to read it.
type fileSpec struct {
	dir      int    // index into Group.dirs
	name     string // file name; "" when the controller is not enabled
	key      string // line key in a "key value" file; "" for a single number
	optional bool   // newer kernels only; a missing file reads as 0
	scale    int64  // multiplier applied to the value; 0 means 1
	// fresh makes every read open the file anew. v1 cgroup.procs needs
	// it: the kernel caches the pid list of an open file and serves the
	// cached copy for up to a second, so a kept descriptor reads stale
	// pids; only an open rebuilds the list.
	fresh bool
}

// fd returns the kept descriptor for file i, opening it on first use.
// Opening lazily keeps Create and Load (used by sweeping, which never
// reads counters) free of the extra opens.
func (g *Group) fd(i int) (int, error) {
	if fd := g.fds[i]; fd != fdUnopened {
		return fd, nil
	}
	s := &g.p.files[i]
	if s.name == "" {
		g.fds[i] = fdAbsent
		return fdAbsent, nil
	}
	fd, err := g.open(s.dir, s.name, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && s.optional {
			g.fds[i] = fdAbsent
			return fdAbsent, nil
		}
		return 0, fmt.Errorf("cgroup: group %s: %w", g.id, err)
	}
	g.fds[i] = fd
	return fd, nil
}

// OpenCounters opens the files Counters reads, so that the first reading
// (a command's first) costs reads only. Create leaves them unopened for
// callers that never read counters (sweeping).
func (g *Group) OpenCounters() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range numCounterFiles {
		if _, err := g.fd(i); err != nil {
			return err
		}
	}
	return nil
}

// read returns the current content of file i in g.buf, or nil when the
// file is absent. The caller holds g.mu.
func (g *Group) read(i int) ([]byte, error) {
	s := &g.p.files[i]
	if s.fresh {
		fd, err := g.open(s.dir, s.name, unix.O_RDONLY|unix.O_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("cgroup: group %s: %w", g.id, err)
		}
		n, err := preadRetry(fd, g.buf[:])
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("cgroup: group %s: %w", g.id, &fs.PathError{Op: "read", Path: filepath.Join(g.dirs[s.dir], s.name), Err: err})
		}
		return g.buf[:n], nil
	}
	fd, err := g.fd(i)
	if err != nil || fd < 0 {
		return nil, err
	}
	n, err := preadRetry(fd, g.buf[:])
	if err != nil {
		// ENODEV here means the group was removed under the kept fd.
		p := filepath.Join(g.dirs[s.dir], s.name)
		return nil, fmt.Errorf("cgroup: group %s: %w", g.id, &fs.PathError{Op: "read", Path: p, Err: err})
	}
	return g.buf[:n], nil
}

// Counters reads the group's counters. The files stay open between calls
// (each read is one pread at offset 0, which makes the kernel regenerate
// the content), so a monitor polling every few milliseconds costs seven
// system calls per poll and no allocation.
func (g *Group) Counters() (Counters, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var v [numCounterFiles]int64
	for i := range numCounterFiles {
		data, err := g.read(i)
		if err != nil {
			return Counters{}, err
		}
		if data == nil {
			continue
		}
		s := &g.p.files[i]
		x, err := parseValue(data, s.key)
		if err != nil {
			return Counters{}, fmt.Errorf("cgroup: group %s: parse %s: %w", g.id, s.name, err)
		}
		if s.scale != 0 {
			x *= s.scale
		}
		v[i] = x
	}
	return Counters{
		MemoryBytes:     v[fMemory],
		MemoryPeakBytes: v[fMemoryPeak],
		OOMKills:        v[fOOM],
		Pids:            v[fPids],
		PidsPeak:        v[fPidsPeak],
		PidsMaxEvents:   v[fPidsEvents],
		CPUUsageNanos:   v[fCPU],
	}, nil
}

// CPUUsage reads the group's CPU time alone (Counters' CPUUsageNanos):
// one read, for a caller that needs a base to count from.
func (g *Group) CPUUsage() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	data, err := g.read(fCPU)
	if err != nil || data == nil {
		return 0, err
	}
	x, err := parseValue(data, g.p.files[fCPU].key)
	if err != nil {
		return 0, fmt.Errorf("cgroup: group %s: parse %s: %w", g.id, g.p.files[fCPU].name, err)
	}
	if s := g.p.files[fCPU].scale; s != 0 {
		x *= s
	}
	return x, nil
}

// Populated reports whether any process is in the group: the populated
// line of cgroup.events on v2 (which covers nested groups too), a
// non-empty cgroup.procs in the memory hierarchy on v1 (opened anew on
// each call, see fileSpec.fresh). Exited processes that wait to be reaped
// (zombies) no longer count on either.
func (g *Group) Populated() (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	data, err := g.read(fPopulated)
	if err != nil {
		return false, err
	}
	if g.p.version == V1 {
		// Any pid at all is enough; the first read need not hold them all.
		return len(bytes.TrimSpace(data)) > 0, nil
	}
	n, err := parseValue(data, "populated")
	if err != nil {
		return false, fmt.Errorf("cgroup: group %s: parse cgroup.events: %w", g.id, err)
	}
	return n != 0, nil
}

// Close releases the kept file descriptors, of control files and of the
// group's directories. The group itself is untouched and the Group stays
// usable; a later Counters reopens what it needs, by path.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for i, fd := range g.fds {
		if fd >= 0 {
			if err := unix.Close(fd); err != nil {
				errs = append(errs, fmt.Errorf("cgroup: group %s: close %s: %w", g.id, g.p.files[i].name, err))
			}
		}
		g.fds[i] = fdUnopened
	}
	g.closeDirs()
	return errors.Join(errs...)
}

// parseValue extracts a number from cgroup file content. With key "" the
// whole content is one number (memory.current, pids.current, ...);
// otherwise it is the value of the line "key value" in a flat keyed file
// (memory.events, pids.events, cpu.stat, memory.oom_control). A key the
// file does not have reads as 0: older kernels lack some lines (oom_kill
// before 4.13), and an absent event line means the event never happened.
// It does not allocate.
func parseValue(data []byte, key string) (int64, error) {
	if key == "" {
		return parseInt(bytes.TrimSpace(data))
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		// An exact key match followed by a space: "oom_kill" must not
		// match "oom_kill_disable" or "oom_group_kill", nor "max" match
		// "max.imposed".
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			return parseInt(bytes.TrimSpace(line[len(key)+1:]))
		}
	}
	return 0, nil
}

// parseInt parses a non-negative decimal counter.
func parseInt(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty value")
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("invalid number %q", b)
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, fmt.Errorf("number %q: %w", b, strconv.ErrRange)
		}
		n = n*10 + d
	}
	return n, nil
}
