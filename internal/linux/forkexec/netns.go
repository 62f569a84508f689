package forkexec

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// NetnsChild is a child making a network namespace (see StartNetns).
type NetnsChild struct {
	// mu guards s and pidfd, so that one Wait takes the namespace. The
	// child writes to s until it exits; Wait reads s once it has reaped
	// it.
	mu    sync.Mutex
	s     *forkSpec
	pidfd int
}

// StartNetns starts a child that makes a network namespace with only lo,
// up, leaves a close-on-exec descriptor of it in this process's descriptor
// table, and exits; Wait returns the descriptor. The child is a process on
// this process's memory and descriptor table (CLONE_VM|CLONE_FILES) that
// runs a few raw system calls on a stack of its own, with every signal
// blocked: the kernel runs it alongside the caller at once, where a
// goroutine would wait for the Go scheduler to give it a processor, which
// a process that is busy starting up does not do before it blocks. It is
// the caller's child, and a namespace it makes is owned by the caller's
// user namespace. Only where SharesMemory.
func StartNetns() (*NetnsChild, error) {
	if !SharesMemory() {
		return nil, errors.New("forkexec: StartNetns needs a child on the caller's memory")
	}
	s := &forkSpec{pidfd: -1, pathFD: -1, syncR: -1, syncW: -1, errW: -1, uid: -1, gid: -1, netns: true, nsFD: -1}
	copy(s.nsPath[:], "/proc/thread-self/ns/net")
	copy(s.ifr[:], "lo")
	s.args.flags = unix.CLONE_VM | unix.CLONE_FILES | unix.CLONE_PIDFD
	s.args.exitSignal = uint64(unix.SIGCHLD)
	s.legacy = true
	s.share = shareStack
	s.newStack()
	s.stackTop = (addrOf(&s.stack[0]) + childStack - 64) &^ 15

	_, errno, err := forkBlocked(s, false, 0)
	if err != nil {
		return nil, err
	}
	if errno != 0 {
		return nil, fmt.Errorf("forkexec: clone: %w", errno)
	}
	return &NetnsChild{s: s, pidfd: int(s.pidfd)}, nil
}

// Wait waits for the child to end and returns the namespace it made, or
// the step that failed. Later calls return an error.
func (c *NetnsChild) Wait() (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s == nil {
		return nil, errors.New("forkexec: network namespace already taken")
	}
	var info unix.Siginfo
	var err error
	for {
		if err = unix.Waitid(unix.P_PIDFD, c.pidfd, &info, unix.WEXITED, nil); err != unix.EINTR {
			break
		}
	}
	unix.Close(c.pidfd)
	s := c.s
	c.s = nil
	if err != nil {
		// Not known to have ended: its stack stays its own.
		return nil, fmt.Errorf("forkexec: wait for the network namespace's child: %w", err)
	}
	// Reaped: the child is off its stack for good.
	s.freeStack()
	if s.nsErr != 0 {
		if s.nsFD >= 0 {
			unix.Close(s.nsFD)
		}
		return nil, fmt.Errorf("forkexec: network namespace: %s: %w", netnsSteps[s.nsStep], s.nsErr)
	}
	return os.NewFile(uintptr(s.nsFD), "netns"), nil
}

// The network namespace child's steps, for its errors.
const (
	nsUnshare = iota
	nsOpen
	nsSocket
	nsGetFlags
	nsSetFlags
)

var netnsSteps = [...]string{"unshare", "open it", "socket", "get lo's flags", "bring lo up"}

//go:norace
//go:nosplit
func netnsFail(s *forkSpec, step uint8, e syscall.Errno) {
	s.nsStep, s.nsErr = step, e
	for {
		syscall.RawSyscall(unix.SYS_EXIT, 1, 0, 0)
	}
}
