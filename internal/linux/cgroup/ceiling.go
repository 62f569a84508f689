package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
)

// SetCeiling bounds the parent group itself, so that the kernel holds
// every sandbox under it together to memory bytes and pids tasks, whoever
// made them: a backstop behind the admission of one process, which sees
// only its own sandboxes. Zero leaves a dimension as it is; a negative
// value lifts its ceiling. On v1 the
// memory ceiling bounds memory+swap and socket buffers too, as a group's
// does (see v1Resources); on v2 a parent whose own parent does not
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
		if p.tcpmem {
			write(mem, "memory.kmem.tcp.limit_in_bytes", memory)
		}
	}
	if pids != 0 {
		write(dir(ctrlPids), "pids.max", pids)
	}
	return errors.Join(errs...)
}
