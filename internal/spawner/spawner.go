// Package spawner is a small helper process that clones each sandbox's init
// for the host.
//
// Go can clone a child into a new user namespace only with a full fork (not
// vfork), because the parent must write the child's uid map while the child
// waits. A full fork write-protects every page of the parent, and the parent
// then takes a page fault for each page it writes afterwards: for a daemon
// with a large heap that is thousands of faults for every sandbox created.
// The spawner takes that fork instead. It is the airlock binary re-executed
// with argv[0] = Arg0, its heap is tiny, and it does nothing but clone
// inits: into the network namespace and (cgroup v1) cgroup it is handed, or
// (cgroup v2) straight into the cgroup whose directory it is handed.
//
// Inits are cloned as children of the host (CLONE_PARENT), which reaps them.
// The spawner and every init die with the host (parent-death signal), so
// nothing outlives a crashed airlock process but what the next one sweeps.
package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] the host starts the spawner with.
const Arg0 = "airlock-spawner"

// connFD is where the host places the spawner's end of its socket.
const connFD = 3

// IsSpawner reports whether this process was started as the spawner.
func IsSpawner() bool { return len(os.Args) == 2 && os.Args[0] == Arg0 }

// Request asks for one init. Its descriptors, in order: the init's end of
// the control socket, the write end of its diagnostics pipe, the network
// namespace to clone into, and on cgroup v2 the cgroup directory.
type Request struct {
	ID uint64 `json:"id"`
	// Path is the binary to execute as init; Arg0 is its argv[0].
	Path string `json:"path"`
	Arg0 string `json:"arg0"`
	// Env is init's whole environment.
	Env []string `json:"env"`
	// IDBase is the first host uid and gid of the sandbox's range; IDSize
	// how many ids it maps.
	IDBase int `json:"id_base"`
	IDSize int `json:"id_size"`
	// Cgroup is the sandbox's cgroup under the spawner's parent (cgroup
	// v1). On v2 the directory descriptor is used instead.
	Cgroup string `json:"cgroup,omitempty"`
}

// Reply answers a Request. A successful reply carries a pidfd of the init.
type Reply struct {
	ID    uint64 `json:"id"`
	Pid   int    `json:"pid"`
	Error string `json:"error,omitempty"`
}

// Config is the argument the host starts the spawner with (JSON in argv[1]).
type Config struct {
	// CgroupParent is the runtime's cgroup parent.
	CgroupParent string `json:"cgroup_parent"`
}

// Main runs the spawner and returns its exit code.
func Main() int {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-spawner: bad config:", err)
		return 2
	}
	cg, err := cgroup.Open(cfg.CgroupParent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-spawner:", err)
		return 2
	}
	hostNet, err := os.Open("/proc/self/ns/net")
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-spawner:", err)
		return 2
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
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
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			reply.Error = "bad request: " + err.Error()
		} else {
			reply.ID = req.ID
		}
		pidfd := -1
		if reply.Error == "" {
			var ok bool
			reply.Pid, pidfd, ok, err = CloneInto(cg, int(hostNet.Fd()), &req, fds, true)
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
	b, _ := json.Marshal(r)
	var oob []byte
	if pidfd >= 0 {
		oob = unix.UnixRights(pidfd)
	}
	return unix.Sendmsg(connFD, b, oob, nil, 0)
}

// CloneInto clones one init for the sandbox whose cgroup (under cg) is
// req.Cgroup on v1, or the directory fds[3] on v2. fds are as in Request;
// hostNet is the caller's own network namespace, to return to. With
// asSibling the init becomes the caller's parent's child (CLONE_PARENT),
// as the spawner does for its host; without, the caller's own. ok is false
// when the cloning thread could not be brought back: the caller must then
// stop cloning from this process.
//
// The spawner calls it for the host; a short-lived host with a small heap
// may call it itself instead, accepting the full fork of its own memory.
func CloneInto(cg *cgroup.Parent, hostNet int, req *Request, fds []int, asSibling bool) (pid, pidfd int, ok bool, err error) {
	want := 3
	if cg.Version() == cgroup.V2 {
		want = 4
	}
	if len(fds) != want {
		return 0, -1, true, fmt.Errorf("got %d descriptors, want %d", len(fds), want)
	}
	place := Placement{DirFD: -1}
	if cg.Version() == cgroup.V2 {
		place.DirFD = fds[3]
	} else {
		g, err := cg.Load(req.Cgroup)
		if err != nil {
			return 0, -1, true, err
		}
		defer g.Close()
		place.Enter = g.EnterThread
	}
	return Clone(hostNet, req, fds[0], fds[1], fds[2], place, asSibling)
}

// Placement says how a clone is put in its cgroup.
type Placement struct {
	// DirFD, when not -1, is a cgroup v2 directory the child is cloned
	// straight into (CLONE_INTO_CGROUP).
	DirFD int
	// Enter, when set, moves the calling thread into the cgroup (v1,
	// which has no CLONE_INTO_CGROUP) so that the child is born there,
	// and returns how to move the thread back.
	Enter func() (leave func() error, err error)
}

// Clone clones one init on a locked thread that visits the network
// namespace netns (and, through place.Enter, the cgroup) for the clone, and
// returns its pid and a pidfd. ctrl and log become the init's control
// socket (fd 3) and its stdout and stderr. See CloneInto for hostNet,
// asSibling and ok.
func Clone(hostNet int, req *Request, ctrl, log, netns int, place Placement, asSibling bool) (pid, pidfd int, ok bool, err error) {
	sp := forkexec.Spec{
		Path: req.Path, Argv: []string{req.Arg0}, Env: req.Env,
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
		// Born in its cgroup (v2), so its cgroup namespace is rooted
		// there and nothing it does runs uncounted.
		CgroupFD: place.DirFD,
		// Held until its id maps are written, then uid and gid 0 inside.
		// Supplementary groups are cleared: a host gid kept would still
		// grant access to host files by group.
		Hold: true, ClearGroups: true, UID: 0, GID: 0,
		// Init holds nothing of the host's beyond its control channel and
		// a pipe for its own diagnostics; stdin stays closed.
		Files: []int{-1, log, log, ctrl},
	}
	runtime.LockOSThread()
	ok = true
	defer func() {
		if ok {
			runtime.UnlockOSThread()
		}
	}()
	if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
		return 0, -1, true, fmt.Errorf("enter network namespace: %w", err)
	}
	defer func() {
		if serr := unix.Setns(hostNet, unix.CLONE_NEWNET); serr != nil {
			ok = false
			err = errors.Join(err, fmt.Errorf("restore network namespace: %w", serr))
		}
	}()
	leave := func() error { return nil }
	if place.Enter != nil {
		if leave, err = place.Enter(); err != nil {
			return 0, -1, true, err
		}
	}
	c, err := forkexec.Start(sp)
	if lerr := leave(); lerr != nil {
		ok = false
		if err == nil {
			c.Kill()
			err = lerr
		} else {
			err = errors.Join(err, lerr)
		}
	}
	if err != nil {
		return 0, -1, ok, fmt.Errorf("clone init: %w", err)
	}
	// The id maps, written by the caller as the host's root: the child
	// cannot write a map onto host ids itself.
	line := []byte("0 " + strconv.Itoa(req.IDBase) + " " + strconv.Itoa(req.IDSize) + "\n")
	dir := "/proc/" + strconv.Itoa(c.Pid) + "/"
	for _, f := range []string{"uid_map", "gid_map"} {
		if err = os.WriteFile(dir+f, line, 0); err != nil {
			err = fmt.Errorf("write %s: %w", f, err)
			break
		}
	}
	if err == nil {
		err = c.Release()
	} else {
		c.Kill()
	}
	if err != nil {
		// A sibling is its parent's to reap: its pidfd goes with the
		// error.
		return c.Pid, c.PidFD, ok, fmt.Errorf("clone init: %w", err)
	}
	return c.Pid, c.PidFD, ok, nil
}
