package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/seccomp"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/sandbox"
)

// confinedPeer is bwrap taking the confinement steps an airlock sandbox
// takes and plain bwrap does not: the sandbox's cgroup, made with the
// default limits by airlock's own code, bwrap born in it and the group
// removed after; /proc's sensitive entries masked and its kernel
// interfaces bound read-only (bwrap binds some itself); airlock's seccomp
// filter; and a tmpfs for /workspace. It measures what those steps cost a
// peer, in the same run, so that the part of airlock's price over plain
// bwrap that is the steps themselves can be told from the rest (the API,
// the audit record, the egress gateway, a Go init).
type confinedPeer struct {
	cg     *cgroup.Parent
	limits cgroup.Limits
	argv   []string
	filter string // airlock's seccomp filter, for --seccomp
	n      atomic.Int64
}

// newConfinedPeer prepares the peer; close removes what it made.
func newConfinedPeer() (p *confinedPeer, closeFn func(), err error) {
	dir, err := os.MkdirTemp("", "airlock-bench-peer")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	bpf, err := seccomp.DefaultFilter()
	if err != nil {
		return nil, nil, err
	}
	p = &confinedPeer{filter: filepath.Join(dir, "seccomp.bpf")}
	if err := os.WriteFile(p.filter, bpf, 0o600); err != nil {
		return nil, nil, err
	}
	emptyFile, emptyDir := filepath.Join(dir, "f"), filepath.Join(dir, "d")
	if err := os.WriteFile(emptyFile, nil, 0o444); err != nil {
		return nil, nil, err
	}
	if err := os.Mkdir(emptyDir, 0o555); err != nil {
		return nil, nil, err
	}
	bw := bwrapArgv()
	argv := append([]string(nil), bw[:len(bw)-1]...) // all but /bin/true
	masked, dirs, readOnly := sbinit.ProcMasks()
	for _, name := range masked {
		// The entries this kernel has (bwrap cannot make a mount
		// point in /proc).
		if _, err := os.Stat("/proc/" + name); err != nil {
			continue
		}
		from := emptyFile
		if dirs[name] {
			from = emptyDir
		}
		argv = append(argv, "--ro-bind", from, "/proc/"+name)
	}
	covered := map[string]bool{"sys": true, "irq": true, "bus": true} // bwrap's own
	for _, name := range readOnly {
		if _, err := os.Stat("/proc/" + name); err != nil || covered[name] {
			continue
		}
		// The host's entry bound read-only: the same two mount steps
		// as the sandbox's own entry bound and made read-only.
		argv = append(argv, "--ro-bind", "/proc/"+name, "/proc/"+name)
	}
	p.argv = append(argv, "--tmpfs", "/workspace", "--seccomp", "3", "/bin/true")
	if p.cg, err = cgroup.Open("/airlock-bench-peer"); err != nil {
		return nil, nil, err
	}
	lim := sandbox.DefaultLimits()
	p.limits = cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids, CPUMilli: lim.CPUMilli}
	// One group held for the peer's whole life, as a daemon always holds
	// some (its pools' ready sandboxes): the kernel switches the code
	// paths for socket accounting and CPU bandwidth on with the first
	// group that has such a limit and off with the last, by patching its
	// own text, and a peer whose four groups all end at once would pay
	// for that on every run.
	held, err := p.cg.Create("peer-held", p.limits)
	if err != nil {
		p.cg.Close()
		return nil, nil, err
	}
	return p, func() {
		_ = held.Delete(context.Background())
		p.cg.Close()
		os.RemoveAll(dir)
	}, nil
}

// run runs /bin/true once in a fresh cgroup, as the steps above say.
func (p *confinedPeer) run() error {
	g, err := p.cg.Create("peer-"+strconv.FormatInt(p.n.Add(1), 10), p.limits)
	if err != nil {
		return err
	}
	runErr := p.runIn(g)
	// Removed as a sandbox's group is, one rmdir a hierarchy, once the
	// last of bwrap's processes (its sandbox's, killed with it) has left
	// it: the kernel refuses the rmdir until then, and Delete's slow
	// path, which lists the group's files, is not what a sandbox pays.
	for deadline := time.Now().Add(5 * time.Second); !g.TryDelete(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			return errors.Join(runErr, g.Delete(context.Background()))
		}
	}
	return runErr
}

func (p *confinedPeer) runIn(g *cgroup.Group) error {
	f, err := os.Open(p.filter)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.ExtraFiles = []*os.File{f} // fd 3
	if g.Version() == cgroup.V2 {
		fd, err := g.DirFD()
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		return cmd.Run()
	}
	// v1: this thread enters the group for the fork, as a sandbox's
	// clone writes itself into the tasks files, and leaves it after.
	runtime.LockOSThread()
	leave, err := g.EnterThread()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err = cmd.Start()
	if lerr := leave(); lerr != nil {
		// The thread is in a mix of groups: the runtime discards it
		// when this goroutine ends locked.
		return errors.Join(err, lerr, cmd.Wait())
	}
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("confined bwrap: %w", err)
	}
	return nil
}
