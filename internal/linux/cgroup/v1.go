package cgroup

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CPU bandwidth constants shared by both versions.
const (
	cpuPeriodUsec   = 100_000 // 100ms, the kernel default period
	cpuMinQuotaUsec = 1_000   // the kernel rejects quotas below 1ms
)

// cpuQuota converts millicores to a quota in microseconds per period.
func cpuQuota(milli int64) int64 {
	return max(cpuPeriodUsec*milli/1000, cpuMinQuotaUsec)
}

func openV1(mounts []mountEntry, parent string) (*Parent, error) {
	l, err := discoverV1(mounts)
	if err != nil {
		return nil, err
	}
	p := &Parent{version: V1, path: parent, v1: l}
	// The parent is made in each hierarchy (once per hierarchy, so
	// co-mounted controllers share it); MkdirAll leaves an existing one,
	// which every airlock process on the host shares, as it is.
	for _, h := range l.hier {
		if err := os.MkdirAll(filepath.Join(h.point, parent), 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: create parent %s: %w", parent, err)
		}
	}
	dir := func(c int) string { return filepath.Join(l.hier[l.idx[c]].point, parent) }
	if !exists(filepath.Join(dir(ctrlCPU), "cpu.cfs_quota_us")) {
		return nil, fmt.Errorf("cgroup v1 controller \"cpu\" has no bandwidth control under %s (no cpu.cfs_quota_us; the kernel lacks CONFIG_CFS_BANDWIDTH)", parent)
	}
	p.memsw = exists(filepath.Join(dir(ctrlMemory), "memory.memsw.limit_in_bytes"))
	p.tcpmem = exists(filepath.Join(dir(ctrlMemory), "memory.kmem.tcp.limit_in_bytes"))
	mem, pids, acct := l.idx[ctrlMemory], l.idx[ctrlPids], l.idx[ctrlCPUAcct]
	p.files = [numFiles]fileSpec{
		fMemory:     {dir: mem, name: "memory.usage_in_bytes"},
		fMemoryPeak: {dir: mem, name: "memory.max_usage_in_bytes"},
		fOOM:        {dir: mem, name: "memory.oom_control", key: "oom_kill"},
		fPids:       {dir: pids, name: "pids.current"},
		fPidsPeak:   {dir: pids, name: "pids.peak", optional: true},
		fPidsEvents: {dir: pids, name: "pids.events", key: "max"},
		fCPU:        {dir: acct, name: "cpuacct.usage"},
		fPopulated:  {dir: mem, name: "cgroup.procs", fresh: true},
	}
	return p, nil
}

// v1Resources lists the writes that apply l to a new v1 group. Only the
// limits that are set are written, so an unlimited dimension costs no
// write at all.
func (p *Parent) v1Resources(l Limits) []limitWrite { return p.v1Writes(l, true) }

// v1Lowering lists the writes that lower a live v1 group's limits to l's
// set fields. The socket buffer ceiling is written only when l sets it:
// a new group's falls back to its memory ceiling, but a lowered memory
// ceiling is still far above the share of the host's TCP memory a
// sandbox's socket ceiling was set to, and writing it there would raise
// that ceiling, giving one sandbox the socket buffers of all.
func (p *Parent) v1Lowering(l Limits) []limitWrite { return p.v1Writes(l, false) }

// v1Writes is v1Resources, with the socket ceiling falling back to the
// memory ceiling when sockFallback is set.
func (p *Parent) v1Writes(l Limits, sockFallback bool) []limitWrite {
	var ws []limitWrite
	if l.MemoryBytes > 0 {
		mem, m := p.v1.idx[ctrlMemory], strconv.FormatInt(l.MemoryBytes, 10)
		ws = append(ws, limitWrite{mem, "memory.limit_in_bytes", m})
		// memsw (memory plus swap) comes second: the kernel refuses a
		// memsw limit below limit_in_bytes. Without swap accounting the
		// memsw files do not exist; the limit then bounds RAM only and
		// swap goes uncounted.
		if p.memsw {
			ws = append(ws, limitWrite{mem, "memory.memsw.limit_in_bytes", m})
		}
	}
	// v1 charges socket buffers to a counter of their own, which is off
	// until a limit is written to it: without one, a 64 MiB sandbox held
	// 400 MiB of TCP buffers over loopback pairs it never read, and past
	// the host's tcp_mem every socket on the host stalls. SocketBytes
	// (or else the memory ceiling) bounds them; v2 counts them in
	// memory.current itself.
	sock := l.SocketBytes
	if sockFallback {
		sock = cmp.Or(sock, l.MemoryBytes)
	}
	if sock > 0 && p.tcpmem {
		ws = append(ws, limitWrite{p.v1.idx[ctrlMemory], "memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(sock, 10)})
	}
	if l.Pids > 0 {
		ws = append(ws, limitWrite{p.v1.idx[ctrlPids], "pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	if l.CPUMilli > 0 {
		// The quota alone: it is computed for a period of 100 ms, which
		// is the period the kernel gives every new group and airlock
		// never changes (writing it again cost each sandbox an open, a
		// write and a close of one more control file).
		ws = append(ws, limitWrite{p.v1.idx[ctrlCPU], "cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPUMilli), 10)})
	}
	return ws
}

func (p *Parent) createV1(id string, l Limits) (*Group, error) {
	g := p.newGroup(id)
	// An exclusive mkdir in the memory hierarchy first makes "already
	// exists" an error, atomically, even between concurrent airlock
	// processes, so a leftover (and any process still in it) is never
	// adopted.
	mem := p.v1.idx[ctrlMemory]
	memDir := g.dirs[mem]
	if err := unix.Mkdir(memDir, 0o755); err != nil {
		if err == unix.EEXIST {
			return nil, fmt.Errorf("cgroup: group %s already exists: %w", id, &fs.PathError{Op: "mkdir", Path: memDir, Err: err})
		}
		return nil, fmt.Errorf("cgroup: create group %s: %w", id, &fs.PathError{Op: "mkdir", Path: memDir, Err: err})
	}
	err := func() error {
		for i, d := range g.dirs {
			if i == mem {
				continue
			}
			if err := mkdirShared(d); err != nil {
				return err
			}
		}
		if err := g.openDirs(); err != nil {
			return err
		}
		return g.writeLimits(p.v1Resources(l))
	}()
	if err != nil {
		g.closeDirs()
		return nil, errors.Join(fmt.Errorf("cgroup: create group %s: %w", id, err), g.removeDirs())
	}
	return g, nil
}

// loadV1 succeeds when the group's directory exists in any hierarchy, so
// that a group whose Delete was interrupted halfway can still be swept.
func (p *Parent) loadV1(id string) (*Group, error) {
	g := p.newGroup(id)
	for _, d := range g.dirs {
		var st unix.Stat_t
		err := unix.Lstat(d, &st)
		if err == nil {
			return g, nil
		}
		if err != unix.ENOENT {
			return nil, fmt.Errorf("cgroup: load group %s: %w", id, &fs.PathError{Op: "lstat", Path: d, Err: err})
		}
	}
	return nil, fmt.Errorf("cgroup: group %s under %s: %w", id, p.path, fs.ErrNotExist)
}

// hostDir maps a cgroup path as /proc/<pid>/cgroup shows it to the
// directory under this hierarchy's mount. The two differ when the mount
// shows only a subtree of the hierarchy (inside a container, say).
func (h *hierarchy) hostDir(cg string) (string, error) {
	if h.root == "/" {
		return filepath.Join(h.point, cg), nil
	}
	if cg == h.root || strings.HasPrefix(cg, h.root+"/") {
		return filepath.Join(h.point, strings.TrimPrefix(cg, h.root)), nil
	}
	return "", fmt.Errorf("cgroup: %s cgroup %s is outside the subtree %s mounted at %s", h.name, cg, h.root, h.point)
}

// EnterThread moves the calling OS thread into the group, in every
// hierarchy the package uses, and returns leave, which moves it back to
// exactly the cgroups it was in before. It is for cgroup v1, where there
// is no CLONE_INTO_CGROUP: a process cloned from the thread in between is
// born inside the group, so none of its work goes uncounted, and a
// CLONE_NEWCGROUP in that clone makes the group the namespace's root.
// It serves a caller that starts a process with os/exec (the tests); a
// clone made with raw system calls places itself instead, cheaper, with
// TasksFDs (two moves per hierarchy fewer, on no thread of the caller's).
//
// The caller must hold runtime.LockOSThread from before EnterThread until
// after leave returns, and clone on that thread. The Go runtime does not
// start new threads from a locked one, so nothing else inherits the
// group. If leave fails, the error names the hierarchy; the thread is then
// in a mix of cgroups, and the caller should let its goroutine exit
// without unlocking so the runtime discards the thread.
//
// The thread is moved by writing "0" (the caller itself) to each tasks
// file rather than its tid: for the caller's own thread the kernel skips
// the global threadgroup lock it otherwise takes in write mode (measured
// about 20% cheaper per move). Besides CPU time, only the task count
// changes in the group while the thread is there: it counts against
// pids.max, so with a pids limit of 1 the clone would be refused.
func (g *Group) EnterThread() (leave func() error, err error) {
	if g.p.version != V1 {
		return nil, errors.New("cgroup: EnterThread is for cgroup v1; on v2 clone with CLONE_INTO_CGROUP and DirFD")
	}
	hier := g.p.v1.hier
	back, err := currentTasksFiles(hier, "/proc/thread-self/cgroup", "tasks")
	if err != nil {
		return nil, err
	}
	for i := range hier {
		if err := writeFile(g.dirs[i]+"/tasks", "0"); err != nil {
			return nil, errors.Join(
				fmt.Errorf("cgroup: move thread into group %s in the %s hierarchy: %w", g.id, hier[i].name, err),
				g.p.returnThread(hier[:i], back[:i]))
		}
	}
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return g.p.returnThread(hier, back)
	}, nil
}

// maxReturnFDs bounds the descriptors a Parent keeps for returning
// threads. Threads almost always return to the same cgroup per hierarchy
// (the airlock process's own), so a handful is plenty; the bound only
// guards against a process whose threads wander.
const maxReturnFDs = 32

// returnThread moves the calling thread back into the cgroups whose tasks
// files are listed, one per hierarchy, naming every hierarchy that
// refused.
//
// The descriptors of those files are kept on the Parent: every sandbox
// start returns its thread to the same few cgroups, and an open plus a
// close cost more than the move itself. The lock is held across the write
// so no descriptor is closed (and its number reused) while another thread
// writes to it; the kernel serializes cgroup moves globally anyway.
func (p *Parent) returnThread(hier []hierarchy, files []string) error {
	p.retMu.Lock()
	defer p.retMu.Unlock()
	var errs []error
	for i, f := range files {
		if err := p.writeReturnLocked(f); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: move thread back in the %s hierarchy: %w", hier[i].name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Parent) writeReturnLocked(file string) error {
	if fd, ok := p.retFDs[file]; ok {
		if _, err := unix.Write(fd, []byte("0")); err == nil {
			return nil
		}
		// The cgroup may have been removed and recreated under the same
		// path (ENODEV on the old descriptor); forget it and go by path.
		unix.Close(fd)
		delete(p.retFDs, file)
	}
	fd, err := openRetry(file, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return &fs.PathError{Op: "open", Path: file, Err: err}
	}
	if err = writeFD(fd, "0"); err != nil {
		unix.Close(fd)
		return &fs.PathError{Op: "write", Path: file, Err: err}
	}
	if p.retFDs == nil {
		p.retFDs = map[string]int{}
	}
	if len(p.retFDs) >= maxReturnFDs {
		unix.Close(fd)
		return nil
	}
	p.retFDs[file] = fd
	return nil
}

// currentTasksFiles returns, per hierarchy, the given control file
// ("tasks" or "cgroup.procs") of the cgroup a task is in now, read from
// its /proc cgroup file.
func currentTasksFiles(hier []hierarchy, procFile, file string) ([]string, error) {
	var buf [4096]byte
	data, err := readFile(procFile, buf[:])
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	out := make([]string, len(hier))
	for i := range hier {
		cg, ok := procCgroupPath(data, hier[i].name)
		if !ok {
			return nil, fmt.Errorf("cgroup: %s lists no %s hierarchy", procFile, hier[i].name)
		}
		dir, err := hier[i].hostDir(cg)
		if err != nil {
			return nil, err
		}
		out[i] = dir + "/" + file
	}
	return out, nil
}

// moveProcBack returns process pid to the cgroups whose cgroup.procs
// files are listed, naming every hierarchy that refused.
func moveProcBack(hier []hierarchy, files []string, pid int) error {
	var errs []error
	for i := range files {
		if err := writeProcs(files[i], pid); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: move process %d back in the %s hierarchy: %w", pid, hier[i].name, err))
		}
	}
	return errors.Join(errs...)
}

func (g *Group) addProcV1(pid int) error {
	hier := g.p.v1.hier
	procFile := "/proc/" + strconv.Itoa(pid) + "/cgroup"
	back, err := currentTasksFiles(hier, procFile, "cgroup.procs")
	if err != nil {
		return err
	}
	for i := range hier {
		if err := writeProcs(g.dirs[i]+"/cgroup.procs", pid); err != nil {
			return errors.Join(
				fmt.Errorf("cgroup: move process %d into group %s in the %s hierarchy: %w", pid, g.id, hier[i].name, err),
				moveProcBack(hier[:i], back[:i], pid))
		}
	}
	return nil
}

// writeProcs writes pid to a cgroup.procs file, retrying on EINVAL: the
// kernel refuses to move a task that is still being forked (TASK_NEW), a
// window a caller that has just started the process can hit. runc and
// containerd retry the same way.
func writeProcs(file string, pid int) error {
	s := strconv.Itoa(pid)
	var err error
	for range 5 {
		if err = writeFile(file, s); !errors.Is(err, unix.EINVAL) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return err
}

// procsV1 lists the pids of the group and its descendants in the freezer
// hierarchy (the one Kill freezes), falling back to another hierarchy if
// an interrupted Delete already removed that one.
func (g *Group) procsV1() ([]int, error) {
	l := g.p.v1
	for _, c := range []int{ctrlFreezer, ctrlMemory, ctrlPids, ctrlCPU} {
		d := g.dirs[l.idx[c]]
		if !exists(d) {
			continue
		}
		pids, err := procsTree(d)
		if err != nil {
			if isNotExist(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("cgroup: list processes of group %s: %w", g.id, err)
		}
		return pids, nil
	}
	return nil, nil
}

// TasksFDs opens the group's tasks file in every v1 hierarchy, in the
// Parent's hierarchy order, for writing (O_CLOEXEC): a thread writing "0"
// to each moves itself into the group, which is how a clone places itself
// (forkexec.Spec.CgroupTasks), whichever process made the clone. The
// caller closes the descriptors.
func (g *Group) TasksFDs() ([]int, error) {
	if g.p.version != V1 {
		return nil, errors.New("cgroup: TasksFDs is for cgroup v1; on v2 use DirFD")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	fds := make([]int, 0, len(g.dirs))
	for i := range g.dirs {
		fd, err := g.open(i, "tasks", unix.O_WRONLY|unix.O_CLOEXEC)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, fmt.Errorf("cgroup: group %s: %w", g.id, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// Hierarchies is the number of v1 hierarchies a group has a directory
// (and TasksFDs a descriptor) in; 0 on v2.
func (p *Parent) Hierarchies() int {
	if p.version != V1 {
		return 0
	}
	return len(p.v1.hier)
}
