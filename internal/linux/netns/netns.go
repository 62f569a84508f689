// Package netns creates network namespaces for sandboxes. A namespace made
// here is owned by the caller's (host) user namespace, so code inside a
// sandbox's own user namespace holds no capability over it and cannot add
// interfaces, routes or addresses: it gets exactly the loopback device this
// package brings up, and nothing else.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// New creates a fresh network namespace with only `lo`, up, and returns a
// descriptor of it. A process that setns(2)es into it from the host's user
// namespace, or is cloned by a thread that did, lives in it.
func New() (*os.File, error) { return NewAndRun(nil) }

// NewAndRun creates a fresh network namespace with only `lo`, up, and calls
// fn (if not nil) on an OS thread that is inside it, so that a process
// cloned by fn is born in the namespace. It returns a descriptor of the namespace (the
// caller closes it; the namespace lives while a process or descriptor holds
// it) and fn's error.
//
// The thread is switched back to its original namespace afterwards. If that
// fails the thread is never unlocked, so the Go runtime destroys it instead of
// running other goroutines in the wrong namespace.
func NewAndRun(fn func() error) (*os.File, error) {
	type res struct {
		ns  *os.File
		err error
	}
	done := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		ns, err, restored := newAndRun(fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- res{ns, err}
	}()
	r := <-done
	return r.ns, r.err
}

// home is a descriptor of the network namespace a thread of this process
// is in when nothing here has switched it: the one NewAndRun and Do
// switch their thread back to. Every thread of the process starts there,
// and one that fails to return is never unlocked, so the Go runtime
// destroys it: an unlocked thread, such as the one the first caller locks,
// is always there. Opened once: two opens of /proc/thread-self/ns/net a
// sandbox, and one a socket reading on cgroup v2, were spent on it.
var home = sync.OnceValues(func() (int, error) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open current network namespace: %w", err)
	}
	return fd, nil
})

func newAndRun(fn func() error) (ns *os.File, err error, restored bool) {
	orig, err := home()
	if err != nil {
		return nil, err, true
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("create network namespace: %w", err), true
	}
	defer func() {
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, fmt.Errorf("restore network namespace: %w", serr))
			restored = false
			return
		}
		restored = true
	}()
	ns, err = os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open new network namespace: %w", err), false
	}
	if err := loopbackUp(); err != nil {
		ns.Close()
		return nil, err, false
	}
	if fn != nil {
		if err := fn(); err != nil {
			ns.Close()
			return nil, err, false
		}
	}
	return ns, nil, false
}

// LoopbackUp sets IFF_UP on lo in the calling thread's network namespace.
func LoopbackUp() error { return loopbackUp() }

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: set flags: %w", err)
	}
	return nil
}

// Do calls fn on an OS thread that has entered the network namespace ns, so
// that sockets fn creates belong to that namespace (a socket keeps the
// namespace it was created in for its whole life). fn must not start
// goroutines that create sockets: they would run on other threads.
//
// The thread is switched back afterwards; if that fails it is never
// unlocked, so the Go runtime destroys it rather than reuse it in the wrong
// namespace.
func Do(ns *os.File, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := do(ns, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func do(ns *os.File, fn func() error) (err error, restored bool) {
	orig, err := home()
	if err != nil {
		return err, true
	}
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace: %w", err), true
	}
	err = fn()
	if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
		return errors.Join(err, fmt.Errorf("restore network namespace: %w", serr)), false
	}
	return err, true
}
