package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openV2 opens parent on the cgroup2 hierarchy mounted at root and
// delegates ctrls to its children. Open passes the real mount and
// v2Controllers; tests pass other roots and controller sets.
//
// Every ancestor is checked and written on its own, so that a missing
// controller is reported at the level where it is missing.
func openV2(root, parent string, ctrls []string) (*Parent, error) {
	dir, cg := root, "/"
	comps := strings.Split(strings.TrimPrefix(parent, "/"), "/")
	moved := ""
	for i := 0; ; i++ {
		err := delegateV2(dir, cg, ctrls)
		if errors.Is(err, unix.EBUSY) {
			// The no-internal-processes rule: a group that holds
			// processes cannot hand controllers to its children (only
			// the real root is exempt, so "/" here is the root of a
			// cgroup namespace). When the process is this one (a service
			// with Delegate=yes, or a container at its namespace's
			// root), it steps aside into a leaf of its own and tries
			// again.
			var merr error
			if moved, merr = moveSelfAside(dir, cg); merr != nil {
				return nil, errors.Join(err, merr)
			}
			if moved != "" {
				if err = delegateV2(dir, cg, ctrls); errors.Is(err, unix.EBUSY) {
					err = fmt.Errorf("%w; this process moved itself into %s, so other processes are still in %s: move them into a child group, or choose a cgroup parent outside it", err, moved, cg)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		if i == len(comps) {
			break
		}
		dir, cg = filepath.Join(dir, comps[i]), path.Join(cg, comps[i])
		if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
			return nil, fmt.Errorf("cgroup: create %s: %w", cg, &fs.PathError{Op: "mkdir", Path: dir, Err: err})
		}
	}
	p := &Parent{version: V2, path: parent, root: root, ctrls: ctrls, moved: moved}
	mem, pids := p.hasCtrl("memory"), p.hasCtrl("pids")
	// Features are probed on the parent: it runs on the same kernel and,
	// with the controllers enabled in its own parent, has the same files
	// a child will have.
	p.hasKill = exists(filepath.Join(dir, "cgroup.kill"))
	p.hasOOMGroup = mem && exists(filepath.Join(dir, "memory.oom.group"))
	p.hasSwapMax = mem && exists(filepath.Join(dir, "memory.swap.max"))
	name := func(ok bool, n string) string {
		if ok {
			return n
		}
		return ""
	}
	p.files = [numFiles]fileSpec{
		fMemory:     {name: name(mem, "memory.current")},
		fMemoryPeak: {name: name(mem, "memory.peak"), optional: true},
		fOOM:        {name: name(mem, "memory.events"), key: "oom_kill"},
		fPids:       {name: name(pids, "pids.current")},
		fPidsPeak:   {name: name(pids, "pids.peak"), optional: true},
		fPidsEvents: {name: name(pids, "pids.events"), key: "max"},
		// cpu.stat exists in every group, with or without the cpu
		// controller; usage_usec is its first line.
		fCPU:       {name: "cpu.stat", key: "usage_usec", scale: 1000},
		fPopulated: {name: "cgroup.events", key: "populated"},
	}
	return p, nil
}

// delegateV2 makes sure the group at dir (cgroup path cg) offers ctrls and
// enables them for its children.
func delegateV2(dir, cg string, ctrls []string) error {
	if len(ctrls) == 0 {
		return nil
	}
	var buf [512]byte
	avail, err := readFile(filepath.Join(dir, "cgroup.controllers"), buf[:])
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	for _, c := range ctrls {
		if !hasWord(avail, c) {
			return fmt.Errorf("cgroup v2 controller %q not available under %s (its cgroup.controllers lists %q); the host must delegate it to this group", c, cg, string(bytes.TrimSpace(avail)))
		}
	}
	var buf2 [512]byte
	enabled, err := readFile(filepath.Join(dir, "cgroup.subtree_control"), buf2[:])
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	var missing []string
	for _, c := range ctrls {
		if !hasWord(enabled, c) {
			missing = append(missing, "+"+c)
		}
	}
	if len(missing) == 0 {
		// Skipping the write matters: it takes the cgroup-wide lock and,
		// for the root, is refused inside some containers.
		return nil
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(missing, " ")); err != nil {
		hint := ""
		if errors.Is(err, unix.EBUSY) {
			hint = " (the group holds processes of its own, and cgroup v2 lets only groups without processes hand controllers to children)"
		}
		return fmt.Errorf("cgroup v2: enable %s for the children of %s: %w%s", strings.Join(missing, " "), cg, err, hint)
	}
	return nil
}

// SupervisorGroup is the leaf a process moves itself into when its own
// cgroup must hand controllers to sandboxes (see Open). The dot keeps it
// apart from sandbox groups, whose ids never contain one, so no sweep
// ever takes it for a leftover.
const SupervisorGroup = "airlock.supervisor"

// moveSelfAside moves the calling process out of the group at dir (cgroup
// path cg) into its leaf SupervisorGroup, if the process is directly in
// that group, and returns the leaf's cgroup path; "" if the process is
// elsewhere. All threads move: cgroup.procs takes the whole process.
func moveSelfAside(dir, cg string) (string, error) {
	own, err := ownCgroupV2()
	if err != nil || own != cg {
		return "", err
	}
	leaf := filepath.Join(dir, SupervisorGroup)
	if err := unix.Mkdir(leaf, 0o755); err != nil && err != unix.EEXIST {
		return "", fmt.Errorf("cgroup: create %s: %w", path.Join(cg, SupervisorGroup), &fs.PathError{Op: "mkdir", Path: leaf, Err: err})
	}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), "0"); err != nil {
		return "", fmt.Errorf("cgroup: move this process into %s: %w", path.Join(cg, SupervisorGroup), err)
	}
	return path.Join(cg, SupervisorGroup), nil
}

// ownCgroupV2 returns the calling process's cgroup on the unified
// hierarchy (the "0::" line of /proc/self/cgroup).
func ownCgroupV2() (string, error) {
	var buf [4096]byte
	data, err := readFile("/proc/self/cgroup", buf[:])
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	return parseOwnV2(data)
}

// parseOwnV2 finds the unified hierarchy's line in /proc/<pid>/cgroup
// content.
func parseOwnV2(data []byte) (string, error) {
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("0::")); ok {
			return string(rest), nil
		}
	}
	return "", errors.New("cgroup: this process has no cgroup v2 membership in /proc/self/cgroup")
}

// hasWord reports whether the space-separated list contains w.
func hasWord(list []byte, w string) bool {
	for f := range bytes.FieldsSeq(list) {
		if string(f) == w {
			return true
		}
	}
	return false
}

func (p *Parent) hasCtrl(c string) bool { return slices.Contains(p.ctrls, c) }

// v2Resources lists the writes that apply l to a new v2 group, or none
// when there is nothing to write.
func (p *Parent) v2Resources(l Limits) ([]limitWrite, error) {
	var ws []limitWrite
	need := func(c string) error {
		if !p.hasCtrl(c) {
			return fmt.Errorf("cgroup v2 controller %q is not enabled under %s", c, p.path)
		}
		return nil
	}
	if l.MemoryBytes > 0 {
		if err := need("memory"); err != nil {
			return nil, err
		}
		ws = append(ws, limitWrite{0, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
		if p.hasSwapMax {
			// memory.max bounds only RAM on v2; without this, swap
			// would extend the ceiling.
			ws = append(ws, limitWrite{0, "memory.swap.max", "0"})
		}
	}
	if p.hasOOMGroup {
		// One OOM kill takes the whole sandbox down instead of leaving it
		// running with a random process missing.
		ws = append(ws, limitWrite{0, "memory.oom.group", "1"})
	}
	if l.Pids > 0 {
		if err := need("pids"); err != nil {
			return nil, err
		}
		ws = append(ws, limitWrite{0, "pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	if l.CPUMilli > 0 {
		if err := need("cpu"); err != nil {
			return nil, err
		}
		ws = append(ws, limitWrite{0, "cpu.max", strconv.FormatInt(cpuQuota(l.CPUMilli), 10) + " " + strconv.Itoa(cpuPeriodUsec)})
	}
	return ws, nil
}

func (p *Parent) createV2(id string, l Limits) (*Group, error) {
	ws, err := p.v2Resources(l)
	if err != nil {
		return nil, err
	}
	g := p.newGroup(id)
	// As on v1, an exclusive mkdir makes an existing group an error
	// rather than adopted. The controllers are already enabled for it:
	// Open wrote subtree_control of every ancestor once for all children.
	if err := unix.Mkdir(g.dirs[0], 0o755); err != nil {
		if err == unix.EEXIST {
			return nil, fmt.Errorf("cgroup: group %s already exists: %w", id, &fs.PathError{Op: "mkdir", Path: g.dirs[0], Err: err})
		}
		return nil, fmt.Errorf("cgroup: create group %s: %w", id, &fs.PathError{Op: "mkdir", Path: g.dirs[0], Err: err})
	}
	err = g.openDirs()
	if err == nil {
		err = g.writeLimits(ws)
	}
	if err != nil {
		g.closeDirs()
		return nil, errors.Join(fmt.Errorf("cgroup: create group %s: %w", id, err), g.removeDirs())
	}
	return g, nil
}

func (p *Parent) loadV2(id string) (*Group, error) {
	g := p.newGroup(id)
	if !exists(g.dirs[0]) {
		return nil, fmt.Errorf("cgroup: group %s under %s: %w", id, p.path, fs.ErrNotExist)
	}
	return g, nil
}

// DirFD returns a new O_DIRECTORY|O_CLOEXEC descriptor of the group's
// directory, for clone3 with CLONE_INTO_CGROUP (syscall.SysProcAttr's
// UseCgroupFD and CgroupFD), which places the child in the group
// atomically at birth. The caller closes it. It is for cgroup v2 only.
func (g *Group) DirFD() (int, error) {
	if g.p.version != V2 {
		return -1, errors.New("cgroup: DirFD needs cgroup v2 (CLONE_INTO_CGROUP); on v1 use TasksFDs")
	}
	fd, err := openRetry(g.dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("cgroup: group %s: %w", g.id, &fs.PathError{Op: "open", Path: g.dirs[0], Err: err})
	}
	return fd, nil
}

// procsV2 lists the pids of the group and its descendants.
func (g *Group) procsV2() ([]int, error) {
	pids, err := procsTree(g.dirs[0])
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroup: list processes of group %s: %w", g.id, err)
	}
	return pids, nil
}
