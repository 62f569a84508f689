// Package spawner is a small helper process that clones each sandbox's init
// for the host.
//
// Go can clone a child into a new user namespace only with a full fork (not
// vfork), because the parent must write the child's uid map while the child
// waits. A full fork write-protects every page of the parent, and the parent
// then takes a page fault for each page it writes afterwards: for a daemon
// with a large heap that is thousands of faults for every sandbox created.
// The spawner takes that fork instead. It is the airlock-init program
// started with argv[0] = Arg0 (or, as a fallback, the airlock binary
// itself), its heap is tiny, and it does nothing but clone inits: into the
// network namespace and cgroup it is handed, by descriptors only. On cgroup
// v2 that is the cgroup's directory, cloned into (CLONE_INTO_CGROUP); on v1
// the cgroup's tasks files, one per hierarchy, which the clone writes itself
// into before anything else. It links no cgroup library and reads no cgroup
// layout of its own.
//
// Inits are cloned as children of the host (CLONE_PARENT), which reaps them.
// The spawner and every init die with the host (parent-death signal), so
// nothing outlives a crashed airlock process but what the next one sweeps.
package spawner

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] the host starts the spawner with.
const Arg0 = "airlock-spawner"

// connFD is where the host places the spawner's end of its socket.
const connFD = 3

// maxTasks bounds the v1 hierarchies a request may name (airlock uses at
// most five: memory, pids, cpu, cpuacct, freezer); maxProgFiles the files
// of a request's program (an image's mount).
const (
	maxTasks     = 8
	maxProgFiles = 4
)

// IsSpawner reports whether this process was started as the spawner.
func IsSpawner() bool { return len(os.Args) == 2 && os.Args[0] == Arg0 }

// Hello is the spawner's first message: the protocol it speaks, so that a
// host never drives a spawner (and inits) of another build.
type Hello struct {
	Version int
}

// Request asks for one init. Its descriptors, in order: the init's end of
// the control socket, the write end of its diagnostics pipe, the network
// namespace to clone into, then either the cgroup v2 directory of the
// sandbox (CgroupDir) or the tasks files of its v1 cgroups, one per
// hierarchy (Config.Hierarchies of them), and last the files of Prog.
type Request struct {
	ID uint64
	// Path is the binary to execute as init; Arg0 is its argv[0].
	Path string
	Arg0 string
	// Env is init's whole environment.
	Env []string
	// IDBase is the first host uid and gid of the sandbox's range; IDSize
	// how many ids it maps.
	IDBase int
	IDSize int
	// CgroupDir says the fourth descriptor is a cgroup v2 directory.
	CgroupDir bool
	// Prog is what the clone runs before it execs init: the sandbox's
	// setup and confinement (see sbinit.Program). ProgFiles are its
	// files; to the spawner they travel as descriptors, last.
	Prog      *forkexec.Prog
	ProgFiles []int
}

// Reply answers a Request. A successful reply carries a pidfd of the init;
// a failed one may too (an init killed after the clone, the host's child
// to reap).
type Reply struct {
	ID    uint64
	Pid   int
	Error string
}

// Config is the argument the host starts the spawner with (argv[1], as
// Config.String writes it).
type Config struct {
	// Version is the host's protocol (initproto.Version).
	Version int
	// Hierarchies is the number of v1 tasks files each request carries,
	// one per hierarchy; 0 on cgroup v2.
	Hierarchies int
}

// Main runs the spawner and returns its exit code.
func Main() int {
	// Nothing the spawner inherited may reach an init: its socket and the
	// cgroup files it was handed stay usable here but close at every exec.
	_ = unix.CloseRange(connFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	cfg, err := ParseConfig(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-spawner:", err)
		return 2
	}
	if err := sendMsg((&Hello{Version: initproto.Version}).Marshal(), nil); err != nil {
		return 0 // the host is gone
	}
	if cfg.Version != initproto.Version {
		// The host says so to its caller: it reads the hello.
		return 2
	}
	if cfg.Hierarchies < 0 || cfg.Hierarchies > maxTasks {
		fmt.Fprintln(os.Stderr, "airlock-spawner: bad config: hierarchies", cfg.Hierarchies)
		return 2
	}
	hostNet, err := os.Open("/proc/self/ns/net")
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-spawner:", err)
		return 2
	}
	buf := make([]byte, 256<<10)
	oob := make([]byte, unix.CmsgSpace((4+maxTasks+maxProgFiles)*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(connFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the host is gone
		}
		fds := rights(oob[:oobn])
		var req Request
		reply := Reply{}
		if err := req.Unmarshal(buf[:n]); err != nil {
			reply.Error = "bad request: " + err.Error()
		} else {
			reply.ID = req.ID
		}
		pidfd := -1
		if reply.Error == "" {
			var ok bool
			reply.Pid, pidfd, ok, err = cloneFor(&req, fds, cfg.Hierarchies, int(hostNet.Fd()))
			if err != nil {
				reply.Error = err.Error()
			}
			if !ok {
				// A thread stuck in a sandbox's namespace or cgroup: stop
				// rather than clone anything else from a broken state.
				send(&reply, pidfd)
				return 3
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err := send(&reply, pidfd); err != nil {
			return 0
		}
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
	}
}

// cloneFor places and clones one init as req and its descriptors say.
func cloneFor(req *Request, fds []int, hierarchies int, hostNet int) (pid, pidfd int, ok bool, err error) {
	want := 3 + hierarchies
	if req.CgroupDir {
		want = 4
	}
	if req.Prog != nil && len(fds) == want+req.Prog.NFiles {
		req.ProgFiles = fds[want:]
		fds = fds[:want]
	}
	if len(fds) != want || (req.CgroupDir && hierarchies != 0) {
		return 0, -1, true, fmt.Errorf("got %d descriptors, want %d", len(fds), want)
	}
	// The program grants Landlock's rights to run init's file by a
	// descriptor of it, which the clone execs: this program's own file.
	exe, err := os.OpenFile(req.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, -1, true, fmt.Errorf("open %s: %w", req.Path, err)
	}
	defer exe.Close()
	place := Placement{DirFD: -1, Exe: exe}
	if req.CgroupDir {
		place.DirFD = fds[3]
	} else {
		place.Tasks = fds[3:]
	}
	return Clone(hostNet, req, fds[0], fds[1], fds[2], place, true)
}

func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func send(r *Reply, pidfd int) error {
	var fds []int
	if pidfd >= 0 {
		fds = []int{pidfd}
	}
	return sendMsg(r.Marshal(), fds)
}

func sendMsg(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(connFD, b, oob, nil, 0)
}

// Placement says how a clone is put in its cgroup, and (Exe) which file
// it runs.
type Placement struct {
	// Exe, when set, is the init program, open: the clone runs that file
	// rather than req.Path (see forkexec.Spec.PathFile). A host that
	// clones for itself needs it, since the init's ids may not search
	// the directories on the way to the program.
	Exe *os.File
	// DirFD, when not -1, is a cgroup v2 directory the child is cloned
	// straight into (CLONE_INTO_CGROUP).
	DirFD int
	// Tasks, when set, are the cgroup's v1 tasks files (v1 has no
	// CLONE_INTO_CGROUP), one per hierarchy: the child writes itself into
	// them before anything else (forkexec.Spec.CgroupTasks).
	Tasks []int
}

// Clone clones one init on a locked thread that visits the network
// namespace netns for the clone (the cgroup is place's), and
// returns its pid and a pidfd. ctrl and log become the init's control
// socket (fd 3) and its stdout and stderr. See CloneInto for hostNet,
// asSibling and ok.
func Clone(hostNet int, req *Request, ctrl, log, netns int, place Placement, asSibling bool) (pid, pidfd int, ok bool, err error) {
	pid, pidfd, execd, ok, err := CloneLater(hostNet, req, ctrl, log, netns, place, asSibling)
	if err != nil {
		return pid, pidfd, ok, err
	}
	if err := execd(); err != nil {
		// A failed child exits by itself; a sibling's pidfd goes with
		// the error, for its parent to reap.
		return pid, pidfd, ok, fmt.Errorf("clone init: %w", err)
	}
	return pid, pidfd, ok, nil
}

// InitTimerSlack is the timer slack an init is born with, which the Go
// runtime threads it starts before its own code runs inherit (its monitor,
// sysmon, above all). The monitor sleeps 20 µs at a time while any of
// init's work is under way, and each of its wake-ups is a context switch:
// about 55 of them per sandbox with the kernel's default slack of 50 µs,
// a third of all the sandbox's switches. With this slack the kernel wakes
// it alongside other timers, at most this late. Init's one goroutine
// needs none of the monitor's duties on time (handing its processor to
// other goroutines, preempting them). Init sets its own thread back to
// the default first thing (sbinit.CommandTimerSlack), so every command,
// which inherits that thread's slack, sleeps as anywhere else.
const InitTimerSlack = 10 * time.Millisecond

// CloneLater is Clone without the wait for init's exec: it returns once
// init is let go, and execd then says how its exec went. The caller's work
// meanwhile overlaps the exec. execd must be called once, also when the
// caller has killed init meanwhile (until init has exec'd it may be
// running on the caller's memory); a failed init exits by itself and is
// the pidfd's holder's to reap.
func CloneLater(hostNet int, req *Request, ctrl, log, netns int, place Placement, asSibling bool) (pid, pidfd int, execd func() error, ok bool, err error) {
	sp := forkexec.Spec{
		Path: req.Path, PathFile: place.Exe, Argv: []string{req.Arg0}, Env: req.Env,
		// The network namespace comes from the cloning thread, so it
		// belongs to the host's user namespace and the sandbox can never
		// reconfigure it.
		Flags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
			unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
		// With asSibling, CLONE_PARENT makes init the host's child, not
		// the spawner's: the host reaps it, so when the host sees it
		// gone, it is gone (no zombie waiting for the spawner). Init sets
		// its own parent-death signal, since the runtime's check for that
		// would see an unexpected parent.
		Sibling: asSibling,
		// Born in its cgroup (v2), or moving itself into it first thing
		// (v1), so its cgroup namespace is rooted there and nothing it
		// does runs uncounted.
		CgroupFD: place.DirFD, CgroupTasks: place.Tasks,
		// On one processor from its exec: the Go runtime's threads start
		// there, their hand-offs during its start cross no processor,
		// and init's all-thread calls find them all there (see
		// sbinit's onThisCPU). Init gives its own thread, which starts
		// the commands, the host's processors back.
		PinCPU: true,
		// Its user namespace is owned by the host uid its root maps to,
		// not by the host's root: what the kernel counts per user is then
		// charged to the sandbox's own uid at the host's level.
		NSOwner: req.IDBase,
		// Held until its id maps are written, then uid and gid 0 inside.
		// Supplementary groups are cleared: a host gid kept would still
		// grant access to host files by group.
		Hold: true, ClearGroups: true, UID: 0, GID: 0,
		// A session of its own: init of a run started on a terminal had
		// that terminal as its controlling one, and the terminal's
		// signals (an interrupt, a window change) reached it.
		Setsid: true,
		// Nothing the host ignores is ignored in the sandbox: init, and
		// so every command, starts with every signal's default action.
		DefaultSignals: true,
		// Init holds nothing of the host's beyond its control channel and
		// a pipe for its own diagnostics; stdin stays closed.
		Files: []int{-1, log, log, ctrl},
		// See InitTimerSlack.
		TimerSlack: uint64(InitTimerSlack),
		// The sandbox's setup and confinement, before init's exec.
		Prog: req.Prog, ProgFiles: req.ProgFiles,
	}
	runtime.LockOSThread()
	ok = true
	defer func() {
		if ok {
			runtime.UnlockOSThread()
		}
	}()
	if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
		return 0, -1, nil, true, fmt.Errorf("enter network namespace: %w", err)
	}
	defer func() {
		if serr := unix.Setns(hostNet, unix.CLONE_NEWNET); serr != nil {
			ok = false
			err = errors.Join(err, fmt.Errorf("restore network namespace: %w", serr))
		}
	}()
	c, err := forkexec.Start(sp)
	if err != nil {
		return 0, -1, nil, ok, fmt.Errorf("clone init: %w", err)
	}
	// The id maps, written by the caller as the host's root: the child
	// cannot write a map onto host ids itself.
	line := []byte("0 " + strconv.Itoa(req.IDBase) + " " + strconv.Itoa(req.IDSize) + "\n")
	dir := "/proc/" + strconv.Itoa(c.Pid) + "/"
	for _, f := range []string{"uid_map", "gid_map"} {
		if err = writeMap(dir+f, line); err != nil {
			err = fmt.Errorf("write %s: %w", f, err)
			break
		}
	}
	if err == nil {
		err = c.Let()
	} else {
		c.Kill()
	}
	if err != nil {
		// A sibling is its parent's to reap: its pidfd goes with the
		// error.
		return c.Pid, c.PidFD, nil, ok, fmt.Errorf("clone init: %w", err)
	}
	return c.Pid, c.PidFD, c.Execd, ok, nil
}

// writeMap writes one id map in a single write, as the kernel requires,
// with plain system calls: os.WriteFile would also try to add the file to
// the Go poller, four calls more on every clone.
func writeMap(path string, line []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := unix.Write(fd, line)
	cerr := unix.Close(fd)
	switch {
	case err != nil:
		return &os.PathError{Op: "write", Path: path, Err: err}
	case n != len(line):
		return &os.PathError{Op: "write", Path: path, Err: unix.EIO}
	case cerr != nil:
		return &os.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}
