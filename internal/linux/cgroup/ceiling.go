package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// SetCeiling bounds the parent group itself, so that the kernel holds
// every sandbox under it together to memory bytes and pids tasks, whoever
// made them: a backstop behind the admission of one process, which sees
// only its own sandboxes. Zero leaves a dimension as it is; a negative
// value lifts its ceiling. On v1 the
// memory ceiling bounds memory+swap (socket buffers have their own:
// SetSocketCeiling); on v2 a parent whose own parent does not
// delegate a controller to it has no file for that limit, which is an
// error naming it.
func (p *Parent) SetCeiling(memory, pids int64) error {
	var errs []error
	write := func(dir, file string, v int64) {
		val := strconv.FormatInt(v, 10)
		if v < 0 {
			val = "max" // v1's memory files take -1, its pids.max "max"
			if p.version == V1 && file != "pids.max" {
				val = "-1"
			}
		}
		if err := writeFile(filepath.Join(dir, file), val); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: ceiling of %s: %w", p.path, err))
		}
	}
	if p.version == V2 {
		dir := filepath.Join(p.root, p.path)
		if memory != 0 {
			write(dir, "memory.max", memory)
		}
		if pids != 0 {
			write(dir, "pids.max", pids)
		}
		return errors.Join(errs...)
	}
	dir := func(c int) string { return filepath.Join(p.v1.hier[p.v1.idx[c]].point, p.path) }
	if memory != 0 {
		mem := dir(ctrlMemory)
		// memsw may never be below the plain limit: raising goes memsw
		// first, lowering plain first. Trying both orders covers both.
		if p.memsw {
			if memory < 0 {
				// Lifting: memsw first, as for a raise.
				write(mem, "memory.memsw.limit_in_bytes", memory)
				write(mem, "memory.limit_in_bytes", memory)
			} else if writeFile(filepath.Join(mem, "memory.memsw.limit_in_bytes"), strconv.FormatInt(memory, 10)) != nil {
				write(mem, "memory.limit_in_bytes", memory)
				write(mem, "memory.memsw.limit_in_bytes", memory)
			} else {
				write(mem, "memory.limit_in_bytes", memory)
			}
		} else {
			write(mem, "memory.limit_in_bytes", memory)
		}
	}
	if pids != 0 {
		write(dir(ctrlPids), "pids.max", pids)
	}
	return errors.Join(errs...)
}

// SetSocketCeiling bounds the socket buffers of every group under the
// parent together, on v1, to bytes (negative lifts it): the host's TCP
// memory (net.ipv4.tcp_mem) is one count for every socket on the host,
// far below what the sandboxes' own ceilings add up to, and past it
// every TCP socket on the host, sshd's and the daemon's too, stalls. v1
// counts a group's socket buffers apart from its memory, hierarchically,
// so the parent's limit holds the sum. It reports false where there is
// no such count: on v2, socket buffers count in each group's memory.max,
// and nothing holds their sum below the memory ceilings' sum.
func (p *Parent) SetSocketCeiling(bytes int64) (bool, error) {
	if p.version != V1 || !p.tcpmem {
		return false, nil
	}
	val := strconv.FormatInt(bytes, 10)
	if bytes < 0 {
		val = "-1"
	}
	dir := filepath.Join(p.v1.hier[p.v1.idx[ctrlMemory]].point, p.path, "memory.kmem.tcp.limit_in_bytes")
	if err := writeFile(dir, val); err != nil {
		return true, fmt.Errorf("cgroup: socket ceiling of %s: %w", p.path, err)
	}
	return true, nil
}

// Ceiling is what the groups above a parent hold every sandbox below it
// to, whatever the parent's own ceiling says: the lowest memory limit and
// the lowest pids limit set on any of them (in a container, on the
// container's own group at the root of its cgroup namespace; under a
// systemd service, its MemoryMax= and TasksMax=). Zero means no limit.
type Ceiling struct {
	MemoryBytes int64
	// MemoryAt is the group whose memory limit it is.
	MemoryAt string
	Pids     int64
	PidsAt   string
}

// unlimitedV1 is the smallest value v1 reports for "no memory limit"
// (LONG_MAX rounded down to a page, 9223372036854771712 with 4 KiB pages).
const unlimitedV1 = 1 << 62

// AncestorCeiling reads the limits of the groups above parent (an
// absolute cgroup path, as Open takes it), up to the root of the
// hierarchy as this process sees it. Groups that do not exist yet, and
// limits a group has no file for, do not bound anything. It creates
// nothing.
func AncestorCeiling(parent string) (Ceiling, error) {
	parent, err := cleanParent(parent)
	if err != nil {
		return Ceiling{}, err
	}
	v, err := Detect()
	if err != nil {
		return Ceiling{}, err
	}
	memDir, pidsDir := unifiedRoot, unifiedRoot
	memFile, pidsFile := "memory.max", "pids.max"
	if v == V1 {
		mounts, err := readMountInfo()
		if err != nil {
			return Ceiling{}, fmt.Errorf("cgroup: %w", err)
		}
		l, err := discoverV1(mounts)
		if err != nil {
			return Ceiling{}, err
		}
		memDir, pidsDir = l.hier[l.idx[ctrlMemory]].point, l.hier[l.idx[ctrlPids]].point
		memFile = "memory.limit_in_bytes"
	}
	var c Ceiling
	var buf [64]byte
	limit := func(dir, group, file string) (int64, bool, error) {
		b, err := readFile(filepath.Join(dir, group, file), buf[:])
		if err != nil {
			if isNotExist(err) {
				return 0, false, nil
			}
			return 0, false, fmt.Errorf("cgroup: %s of %s: %w", file, group, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("cgroup: %s of %s: %q is not a limit", file, group, s)
		}
		return n, n < unlimitedV1, nil
	}
	for g := parent; g != "/"; {
		g = filepath.Dir(g)
		if n, ok, err := limit(memDir, g, memFile); err != nil {
			return c, err
		} else if ok && (c.MemoryBytes == 0 || n < c.MemoryBytes) {
			c.MemoryBytes, c.MemoryAt = n, g
		}
		if n, ok, err := limit(pidsDir, g, pidsFile); err != nil {
			return c, err
		} else if ok && (c.Pids == 0 || n < c.Pids) {
			c.Pids, c.PidsAt = n, g
		}
	}
	return c, nil
}
