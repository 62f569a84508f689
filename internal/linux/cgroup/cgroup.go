package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Version is the cgroup interface the package drives on this host.
type Version int

const (
	// V1 is the legacy interface with one hierarchy per controller (or
	// per group of co-mounted controllers). Hybrid hosts use it too.
	V1 Version = 1
	// V2 is the unified hierarchy.
	V2 Version = 2
)

// String returns "v1" or "v2", as cgroup documentation spells them.
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// Limits are the ceilings applied to one sandbox's group. Zero means no
// limit for every field.
type Limits struct {
	// MemoryBytes caps memory plus swap of the whole group. On v1 it is
	// written to memory.limit_in_bytes and, when swap accounting exists,
	// memory.memsw.limit_in_bytes; on v2 to memory.max with
	// memory.swap.max set to 0, so swap never extends the ceiling.
	MemoryBytes int64
	// SocketBytes caps the group's socket buffers on v1
	// (memory.kmem.tcp.limit_in_bytes, which counts every socket with a
	// cgroup, UDP too, apart from memory); 0 is MemoryBytes. On v2
	// socket buffers count in memory.max and there is no such limit.
	SocketBytes int64
	// Pids caps the number of tasks (pids.max).
	Pids int64
	// CPUMilli is the CPU bandwidth in millicores: 1000 is one full core.
	// The period is 100ms and the quota period*CPUMilli/1000, at least the
	// kernel's 1ms minimum.
	CPUMilli int64
}

// Counters are a group's resource counters, read straight from the cgroup
// files. A counter the running kernel does not provide reads as 0.
type Counters struct {
	// MemoryBytes is the current usage (v1 memory.usage_in_bytes, v2
	// memory.current).
	MemoryBytes int64
	// MemoryPeakBytes is the highest usage so far (v1
	// memory.max_usage_in_bytes, v2 memory.peak on kernels >= 5.19).
	MemoryPeakBytes int64
	// OOMKills counts processes the OOM killer killed in the group (the
	// oom_kill line of v1 memory.oom_control, kernels >= 4.13, or of v2
	// memory.events). Unlike failcnt it counts kills, not allocations that
	// merely hit the limit and reclaimed.
	OOMKills int64
	// Pids is the current number of tasks (pids.current).
	Pids int64
	// PidsPeak is the highest number of tasks so far (pids.peak, where the
	// kernel has it).
	PidsPeak int64
	// PidsMaxEvents counts forks refused because of pids.max (the max line
	// of pids.events).
	PidsMaxEvents int64
	// CPUUsageNanos is the CPU time consumed (v1 cpuacct.usage, v2
	// usage_usec of cpu.stat times 1000).
	CPUUsageNanos int64
}

// Parent is the airlock-owned cgroup that holds one child group per
// sandbox. It is safe for concurrent use. On v1 it keeps a few descriptors
// open for as long as it lives (see EnterThread), so a process should open
// one Parent and share it.
type Parent struct {
	version Version
	path    string // absolute cgroup path of the parent, e.g. "/airlock"

	// v1
	v1     *v1Layout
	memsw  bool // memory.memsw.* exist (swap accounting enabled)
	tcpmem bool // memory.kmem.tcp.* exist (v1 socket buffer accounting)
	// retFDs are kept descriptors of the tasks files threads return to
	// after EnterThread, by path; see returnThread. retMu guards it, and
	// is held across each write so no descriptor is closed in use.
	retMu  sync.Mutex
	retFDs map[string]int

	// v2
	root        string   // cgroup2 mount point
	ctrls       []string // controllers enabled for the children
	hasKill     bool     // cgroup.kill (kernel >= 5.14)
	hasOOMGroup bool     // memory.oom.group (kernel >= 4.19)
	hasSwapMax  bool     // memory.swap.max (swap accounting enabled)
	moved       string   // where Open moved this process, or ""

	// files says where each counter lives, per version, so Counters is one
	// loop over kept descriptors.
	files [numFiles]fileSpec
}

// Group is one sandbox's cgroup. Its methods are safe for concurrent use;
// the usual pattern is a monitor polling Counters while another goroutine
// eventually calls Kill and Delete.
type Group struct {
	p    *Parent
	id   string
	dirs []string // v1: one directory per hierarchy, as in p.v1.hier; v2: one

	mu  sync.Mutex // guards fds, dfds and buf
	fds [numFiles]int
	// dfds are O_PATH descriptors of the directories in dirs, kept from
	// Create until Close: every control file is then opened with a
	// one-component walk from them instead of the whole path from /
	// (about half of each open's cost in cgroupfs). -1 where not open.
	dfds []int
	buf  [512]byte
}

// v2Controllers are the controllers a v2 parent delegates to its children.
// cpuacct and freezer have no v2 controllers: usage is in cpu.stat and
// freezing is built into every v2 group.
var v2Controllers = []string{"memory", "pids", "cpu"}

// unifiedRoot is where a v2 host mounts the unified hierarchy, and where
// a v1 or hybrid host mounts the tmpfs that holds one directory per
// hierarchy; Detect tells them apart by its filesystem type.
const unifiedRoot = "/sys/fs/cgroup"

// Detect reports which cgroup interface the package uses on this host:
// V2 on a unified host, V1 on a legacy or hybrid host.
func Detect() (Version, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(unifiedRoot, &st); err == nil {
		switch st.Type {
		case unix.CGROUP2_SUPER_MAGIC:
			return V2, nil
		case unix.TMPFS_MAGIC:
			// Legacy and hybrid hosts both mount a tmpfs here, with the
			// v1 hierarchies (and on hybrid hosts a cgroup2 mount at
			// unified/) below it. The hybrid cgroup2 mount normally has no
			// memory, pids or cpu controller: they are bound to v1.
			return V1, nil
		}
	}
	return 0, fmt.Errorf("cgroup: no cgroup filesystem is mounted at %s", unifiedRoot)
}

// Open finds the cgroup layout of this host, makes sure the parent group
// exists with the controllers airlock needs, and returns a handle to it.
//
// parent is an absolute cgroup path such as "/airlock", relative to the
// root of the cgroup hierarchies (not to the calling process's own
// cgroup), so every airlock process on the host shares the same parent.
// On v2 the memory, pids and cpu controllers are enabled in
// cgroup.subtree_control of every ancestor from the root down to and
// including parent; the error names the controller and the level when one
// is not available. cgroup v2 refuses that for a group holding processes.
// When the calling process itself is in such a group (a systemd service
// with Delegate=yes whose parent is below its own cgroup, or a container
// at the root of its cgroup namespace), Open moves the process into a leaf
// of that group, SupervisorGroup, and reports it through Moved; processes
// it starts later are born there. Other processes in the way are an
// error.
func Open(parent string) (*Parent, error) {
	parent, err := cleanParent(parent)
	if err != nil {
		return nil, err
	}
	v, err := Detect()
	if err != nil {
		return nil, err
	}
	if v == V2 {
		return openV2(unifiedRoot, parent, v2Controllers)
	}
	mounts, err := readMountInfo()
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return openV1(mounts, parent)
}

// cleanParent validates and normalizes a parent path.
func cleanParent(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("cgroup: parent %q must be an absolute cgroup path such as /airlock", p)
	}
	c := path.Clean(p)
	if c == "/" {
		// Children of the root would be mixed with the host's own groups,
		// and Children would report (and a sweeper might delete) them.
		return "", fmt.Errorf("cgroup: parent %q must not be the cgroup root", p)
	}
	return c, nil
}

// validID checks a child name: [a-z0-9-]{1,64}. The restriction keeps ids
// safe as single path components and distinct from cgroup control files,
// which all contain a dot.
func validID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("cgroup: invalid group id %q: want 1 to 64 characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("cgroup: invalid group id %q: only a-z, 0-9 and '-' are allowed", id)
		}
	}
	return nil
}

// Version reports the cgroup interface in use.
func (p *Parent) Version() Version { return p.version }

// Moved reports the cgroup Open moved this process into to make room for
// sandboxes, or "" when it did not move it (see Open).
func (p *Parent) Moved() string { return p.moved }

// Create makes the child group id with limits l applied. It fails if the
// group already exists, so that a leftover of a crashed process (and any
// process still in it) is never adopted by accident.
func (p *Parent) Create(id string, l Limits) (*Group, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUMilli < 0 {
		return nil, fmt.Errorf("cgroup: negative limit in %+v", l)
	}
	if p.version == V1 {
		return p.createV1(id, l)
	}
	return p.createV2(id, l)
}

// Load opens an existing child group, typically to sweep the leftovers of
// a crashed process. The error wraps fs.ErrNotExist when there is no such
// group.
func (p *Parent) Load(id string) (*Group, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if p.version == V1 {
		return p.loadV1(id)
	}
	return p.loadV2(id)
}

// Children lists the ids of the child groups under the parent. On v1 it
// takes the union over all hierarchies, so a group whose removal was
// interrupted halfway is still found.
func (p *Parent) Children() ([]string, error) {
	var dirs []string
	if p.version == V1 {
		for _, h := range p.v1.hier {
			dirs = append(dirs, filepath.Join(h.point, p.path))
		}
	} else {
		dirs = append(dirs, filepath.Join(p.root, p.path))
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("cgroup: list children: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && validID(e.Name()) == nil {
				seen[e.Name()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// newGroup returns a Group for id with its directories computed but
// nothing opened.
func (p *Parent) newGroup(id string) *Group {
	g := &Group{p: p, id: id}
	for i := range g.fds {
		g.fds[i] = fdUnopened
	}
	if p.version == V1 {
		g.dirs = make([]string, len(p.v1.hier))
		for i, h := range p.v1.hier {
			g.dirs[i] = filepath.Join(h.point, p.path, id)
		}
	} else {
		g.dirs = []string{filepath.Join(p.root, p.path, id)}
	}
	g.dfds = make([]int, len(g.dirs))
	for i := range g.dfds {
		g.dfds[i] = -1
	}
	return g
}

// openDirs opens the O_PATH descriptors of a group just made (see
// Group.dfds). Opened by path once each: a descriptor kept of the parent
// would go stale should the parent be removed and made again.
func (g *Group) openDirs() error {
	for i, d := range g.dirs {
		fd, err := openRetry(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
		if err != nil {
			g.closeDirs()
			return &fs.PathError{Op: "open", Path: d, Err: err}
		}
		g.dfds[i] = fd
	}
	return nil
}

// closeDirs closes the kept directory descriptors; the caller holds g.mu
// or owns g alone.
func (g *Group) closeDirs() {
	for i, fd := range g.dfds {
		if fd >= 0 {
			unix.Close(fd)
			g.dfds[i] = -1
		}
	}
}

// open opens control file name of directory i (an index into dirs), from
// the kept directory descriptor while there is one, else by path. The
// caller holds g.mu or owns g alone. Errors name the whole path.
func (g *Group) open(i int, name string, flags int) (int, error) {
	var fd int
	var err error
	if dfd := g.dfds[i]; dfd >= 0 {
		for {
			fd, err = unix.Openat(dfd, name, flags, 0)
			if err != unix.EINTR {
				break
			}
		}
	} else {
		fd, err = openRetry(filepath.Join(g.dirs[i], name), flags)
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: filepath.Join(g.dirs[i], name), Err: err}
	}
	return fd, nil
}

// write writes data to control file name of directory i in one write(2)
// (see writeFile).
func (g *Group) write(i int, name, data string) error {
	fd, err := g.open(i, name, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := writeFD(fd, data); err != nil {
		return &fs.PathError{Op: "write", Path: filepath.Join(g.dirs[i], name), Err: err}
	}
	return nil
}

// removeDirs is the cleanup of a failed Create: the group never held a
// process, so plain rmdir in every hierarchy suffices.
func (g *Group) removeDirs() error {
	var errs []error
	for _, d := range slices.Backward(g.dirs) {
		errs = append(errs, rmdirIfExists(d))
	}
	return errors.Join(errs...)
}

// ID returns the group's id.
func (g *Group) ID() string { return g.id }

// Version reports the cgroup interface the group belongs to, which decides
// whether the first process is placed with DirFD or TasksFDs.
func (g *Group) Version() Version { return g.p.version }

// AddProc moves a whole running process into the group: into cgroup.procs
// of every hierarchy on v1, of the group on v2. It is the fallback for a
// process that could not be born inside the group. On v1, if one hierarchy
// refuses the process, the hierarchies already done are undone so the
// process is not left split between groups.
func (g *Group) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	if g.p.version == V1 {
		return g.addProcV1(pid)
	}
	if err := writeProcs(filepath.Join(g.dirs[0], "cgroup.procs"), pid); err != nil {
		return fmt.Errorf("cgroup: move process %d into group %s: %w", pid, g.id, err)
	}
	return nil
}

// Lower tightens the memory, pids and CPU limits of a live group to l's
// set fields (zero fields are left as they are). The caller checks that
// each is at or under the group's limit: Lower writes what it is given,
// in the order that lowers (on v1 memory.limit_in_bytes before memsw,
// which may never be below it).
func (g *Group) Lower(l Limits) error {
	var ws []limitWrite
	if g.p.version == V1 {
		ws = g.p.v1Lowering(l)
	} else {
		var err error
		if ws, err = g.p.v2Resources(l); err != nil {
			return err
		}
	}
	if err := g.writeLimits(ws); err != nil {
		return fmt.Errorf("cgroup: lower the limits of group %s: %w", g.id, err)
	}
	return nil
}
