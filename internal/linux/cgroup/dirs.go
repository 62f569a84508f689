package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The operations on group directories: making them, writing the limits,
// listing the processes of a whole subtree and removing it. They are
// plain mkdir, write, read and rmdir on cgroupfs; the package does them
// itself rather than through a cgroup library so that no such library,
// and none of what it imports, is initialised in every airlock process.

// limitWrite is one control file write that applies a limit.
type limitWrite struct {
	dir   int    // index into Group.dirs (always 0 on v2)
	file  string // control file name, e.g. "pids.max"
	value string
}

// writeLimits applies ws in order: the order can matter to the kernel
// (v1 memory.memsw.limit_in_bytes may never be below
// memory.limit_in_bytes, so the limit goes first).
func (g *Group) writeLimits(ws []limitWrite) error {
	for _, w := range ws {
		if err := g.write(w.dir, w.file, w.value); err != nil {
			return err
		}
	}
	return nil
}

// mkdirShared makes a group directory in a v1 hierarchy other than the
// memory one, where it may already exist. The exclusive mkdir in the
// memory hierarchy has already decided that the group is new; a directory
// here is what a Delete left when it was interrupted after the memory
// directory went, and it is reused. (Processes enter all hierarchies
// together, partial moves are undone, so it is as empty as the memory
// directory was.) A missing parent is made again, as Open made it.
func mkdirShared(dir string) error {
	err := unix.Mkdir(dir, 0o755)
	switch err {
	case nil, unix.EEXIST:
		return nil
	case unix.ENOENT:
		return os.MkdirAll(dir, 0o755)
	}
	return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
}

// subdirs returns the directories directly below dir: the nested groups
// (every control file is a regular file).
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// procsTree lists the pids in cgroup.procs of the group at dir and of
// every group nested in it. The error wraps fs.ErrNotExist when dir
// itself is gone; a nested group that vanishes during the walk is skipped,
// since its processes went with it (the kernel removes only empty groups).
func procsTree(dir string) ([]int, error) {
	// Read anew each time, as Procs does: on v1 a kept descriptor serves
	// a cached pid list.
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	pids := parsePids(data)
	subs, err := subdirs(dir)
	if err != nil {
		if isNotExist(err) {
			return pids, nil
		}
		return nil, err
	}
	for _, s := range subs {
		more, err := procsTree(s)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return nil, err
		}
		pids = append(pids, more...)
	}
	return pids, nil
}

// rmdirTree removes the group at dir and every group nested in it,
// deepest first: rmdir(2) removes only a group without child groups
// (control files do not count). The kernel refuses with EBUSY to remove
// a group that still has a task, so no live process is ever dropped from
// accounting this way. A directory already gone is not an error.
func rmdirTree(dir string) error {
	subs, err := subdirs(dir)
	if err != nil && !isNotExist(err) {
		return err
	}
	var errs []error
	for _, s := range subs {
		if err := rmdirTree(s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// dir cannot go while a child is left; its rmdir would only add
		// an EBUSY to the errors that say why.
		return errors.Join(errs...)
	}
	return rmdirIfExists(dir)
}

// removeTrees removes the group in every hierarchy; the error names each
// directory that is left.
func (g *Group) removeTrees() error {
	var errs []error
	for _, d := range g.dirs {
		errs = append(errs, rmdirTree(d))
	}
	return errors.Join(errs...)
}
