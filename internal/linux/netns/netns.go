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
	"strconv"
	"sync"
	"sync/atomic"

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

// ChildEhashEntries is the size of the TCP hash table of established
// connections each namespace made here gets of its own (the kernel's
// net.ipv4.tcp_child_ehash_entries, Linux 6.1 and later; 0 there means a
// new namespace shares the host's). A sandbox has few connections, and a
// table of its own keeps its chains and the host's apart: the host's
// table is sized for the whole machine (262,144 buckets on a 24 GiB
// host), and reading a namespace's TCP sockets (sock_diag, which the
// runtime does every 50–100 ms for a sandbox with TCP sockets open)
// walks every bucket of the table the namespace uses.
const ChildEhashEntries = 1024

// template is the network namespace the namespaces made here are made
// from once UseTemplate has made it: one with nothing in it but
// net.ipv4.tcp_child_ehash_entries set, held for the process's life. A
// namespace takes that setting from the one its maker is in, and setting
// it in the host's own would change every namespace made on the host, by
// anyone. Until then (and in a process that never asks, such as a
// one-shot run, which would pay a whole namespace for it) namespaces are
// made from the caller's.
var template struct {
	once sync.Once
	fd   atomic.Int32 // the descriptor plus one; 0 while there is none
	err  error
}

// UseTemplate makes the namespace later namespaces are made from (see
// ChildEhashEntries) and reports whether it could: false with no error
// on a kernel without per-namespace TCP tables, false with the error when
// it could not be made (namespaces are still made, sharing the host's
// tables). It is made once; later calls return the first's answer.
func UseTemplate() (bool, error) {
	template.once.Do(func() {
		type res struct {
			fd  int
			err error
		}
		done := make(chan res, 1)
		go func() {
			runtime.LockOSThread()
			fd, err, restored := makeTemplate()
			if restored {
				runtime.UnlockOSThread()
			}
			done <- res{fd, err}
		}()
		r := <-done
		template.err = r.err
		if r.fd >= 0 {
			template.fd.Store(int32(r.fd) + 1)
		}
	})
	return template.fd.Load() > 0, template.err
}

func makeTemplate() (fd int, err error, restored bool) {
	orig, err := home()
	if err != nil {
		return -1, err, true
	}
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_child_ehash_entries"); errors.Is(err, os.ErrNotExist) {
		return -1, nil, true
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("create the template network namespace: %w", err), true
	}
	defer func() {
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			fd, err, restored = -1, errors.Join(err, fmt.Errorf("restore network namespace: %w", serr)), false
			return
		}
		restored = true
	}()
	if err := os.WriteFile("/proc/sys/net/ipv4/tcp_child_ehash_entries", []byte(strconv.Itoa(ChildEhashEntries)), 0); err != nil {
		return -1, fmt.Errorf("the template network namespace: %w", err), false
	}
	fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the template network namespace: %w", err), false
	}
	return fd, nil, false
}

func newAndRun(fn func() error) (ns *os.File, err error, restored bool) {
	orig, err := home()
	if err != nil {
		return nil, err, true
	}
	// Without a template the namespace shares the host's tables, as
	// before Linux 6.1.
	from := int(template.fd.Load()) - 1
	if from >= 0 {
		if err := unix.Setns(from, unix.CLONE_NEWNET); err != nil {
			return nil, fmt.Errorf("enter the template network namespace: %w", err), true
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		err = fmt.Errorf("create network namespace: %w", err)
		if from < 0 {
			return nil, err, true
		}
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			return nil, errors.Join(err, fmt.Errorf("restore network namespace: %w", serr)), false
		}
		return nil, err, true
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
