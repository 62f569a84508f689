// Command testprog is run inside sandboxes by airlock's integration tests.
// Each subcommand tries one thing a hostile command would try, or consumes
// one resource, and prints a JSON report; the tests judge the effect from
// the host. It is never shipped.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// report is printed as one JSON line.
type report struct {
	OK    bool   `json:"ok"`
	Errno int    `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
	Value string `json:"value,omitempty"`
}

func errnoOf(err error) int {
	if en, ok := err.(syscall.Errno); ok {
		return int(en)
	}
	if pe, ok := err.(*os.PathError); ok {
		return errnoOf(pe.Err)
	}
	if se, ok := err.(*os.SyscallError); ok {
		return errnoOf(se.Err)
	}
	return -1
}

func result(err error) report {
	if err != nil {
		return report{Errno: errnoOf(err), Error: err.Error()}
	}
	return report{OK: true}
}

func rawErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

var attacks = map[string]func(args []string) report{
	"unshare-user": func([]string) report { return result(unix.Unshare(unix.CLONE_NEWUSER)) },
	"unshare-net":  func([]string) report { return result(unix.Unshare(unix.CLONE_NEWNET)) },
	"mount-tmpfs": func([]string) report {
		return result(unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	},
	"mount-cgroup": func([]string) report {
		return result(unix.Mount("cgroup2", "/tmp", "cgroup2", 0, ""))
	},
	"write-cgroup": func([]string) report {
		// No cgroupfs is visible; try the host's usual paths anyway.
		for _, p := range []string{"/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs", "/proc/1/cgroup"} {
			if err := os.WriteFile(p, []byte("1"), 0); err == nil {
				return report{OK: true, Value: p}
			}
		}
		return report{Errno: int(unix.ENOENT), Error: "no writable cgroup file"}
	},
	"remount-root-rw": func([]string) report {
		return result(unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	},
	"ptrace-init": func([]string) report {
		return result(unix.PtraceAttach(1))
	},
	"read-init-mem": func([]string) report {
		f, err := os.Open("/proc/1/mem")
		if err == nil {
			f.Close()
		}
		return result(err)
	},
	"read-init-environ": func([]string) report {
		b, err := os.ReadFile("/proc/1/environ")
		r := result(err)
		r.Value = string(b)
		return r
	},
	"open-init-ctrl": func([]string) report {
		f, err := os.OpenFile("/proc/1/fd/3", os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return result(err)
	},
	"kill-init": func([]string) report {
		// Every signal, by every way of sending one: kill, tgkill to
		// each of init's threads, a queued signal whose si_code claims a
		// fault (which the Go runtime in init would take for its own),
		// a pidfd, and SIGIO redirected to init with F_SETOWN and
		// F_SETSIG. The report lists every send the kernel accepted.
		var tids []int
		if ents, err := os.ReadDir("/proc/1/task"); err == nil {
			for _, e := range ents {
				if tid, err := strconv.Atoi(e.Name()); err == nil {
					tids = append(tids, tid)
				}
			}
		}
		if len(tids) == 0 {
			tids = []int{1}
		}
		var sent []string
		note := func(how string, sig int, err error) {
			if err == nil {
				sent = append(sent, fmt.Sprintf("%s(%d)", how, sig))
			}
		}
		pidfd, perr := unix.PidfdOpen(1, 0)
		var pr, pw [2]int
		_ = unix.Pipe2(pr[:], 0)
		pw = pr
		for sig := 1; sig <= 64; sig++ {
			s := syscall.Signal(sig)
			note("kill", sig, syscall.Kill(1, s))
			for _, tid := range tids {
				note("tgkill", sig, unix.Tgkill(1, tid, s))
			}
			note("rt_sigqueueinfo", sig, rawErr(sigqueueInit(sig)))
			if perr == nil {
				note("pidfd_send_signal", sig, unix.PidfdSendSignal(pidfd, s, nil, 0))
			}
			// SIGIO as sig, with a POLL_IN code, to init when the pipe
			// becomes readable: the kernel checks the owner's ids when it
			// sends, so a write decides.
			if _, err := unix.FcntlInt(uintptr(pw[0]), unix.F_SETOWN, 1); err == nil {
				_, _ = unix.FcntlInt(uintptr(pw[0]), unix.F_SETSIG, sig)
				fl, _ := unix.FcntlInt(uintptr(pw[0]), unix.F_GETFL, 0)
				_, _ = unix.FcntlInt(uintptr(pw[0]), unix.F_SETFL, fl|unix.O_ASYNC)
				_, _ = unix.Write(pw[1], []byte{1})
				_, _ = unix.Read(pw[0], make([]byte, 1))
			}
		}
		time.Sleep(100 * time.Millisecond)
		return report{OK: len(sent) == 0, Value: strings.Join(sent, " ")}
	},
	"write-sysctl": func([]string) report {
		return result(os.WriteFile("/proc/sys/kernel/hostname", []byte("pwned"), 0))
	},
	"sysrq": func([]string) report {
		return result(os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0))
	},
	"read-kcore": func([]string) report {
		b := make([]byte, 16)
		f, err := os.Open("/proc/kcore")
		if err != nil {
			return result(err)
		}
		defer f.Close()
		n, err := f.Read(b)
		r := result(err)
		r.Value = strconv.Itoa(n)
		return r
	},
	"mknod": func([]string) report {
		return result(unix.Mknod("/tmp/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))))
	},
	"write-usr": func([]string) report {
		return result(os.WriteFile("/usr/airlock-pwned", []byte("x"), 0o644))
	},
	"write-etc": func([]string) report {
		return result(os.WriteFile("/etc/passwd", []byte("x"), 0o644))
	},
	"chroot": func([]string) report { return result(unix.Chroot("/tmp")) },
	// stat PATH: value is "uid:gid:mode" of PATH (not following a last
	// symlink), mode in octal with the type bits.
	"stat": func(args []string) report {
		var st unix.Stat_t
		if err := unix.Lstat(args[0], &st); err != nil {
			return result(err)
		}
		return report{OK: true, Value: fmt.Sprintf("%d:%d:%o", st.Uid, st.Gid, st.Mode)}
	},
	// cat PATH: value is the file's content.
	"cat": func(args []string) report {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return result(err)
		}
		return report{OK: true, Value: string(b)}
	},
	// write PATH TEXT creates or replaces PATH.
	"write": func(args []string) report {
		return result(os.WriteFile(args[0], []byte(args[1]), 0o644))
	},
	// symlink TARGET PATH makes PATH a symbolic link to TARGET.
	"symlink": func(args []string) report { return result(os.Symlink(args[0], args[1])) },
	// setxattr PATH NAME VALUE sets an extended attribute of PATH (not
	// following a last symlink).
	"setxattr": func(args []string) report {
		return result(unix.Lsetxattr(args[0], args[1], []byte(args[2]), 0))
	},
	// chmod PATH MODE (octal, special bits included).
	"chmod": func(args []string) report {
		m, err := strconv.ParseUint(args[1], 8, 32)
		if err != nil {
			return result(err)
		}
		return result(unix.Chmod(args[0], uint32(m)))
	},
	// mknod-at PATH makes a block device node at PATH.
	"mknod-at": func(args []string) report {
		return result(unix.Mknod(args[0], unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0))))
	},
	// id: value is "uid:gid" and the working directory.
	"id": func([]string) report {
		wd, _ := os.Getwd()
		return report{OK: true, Value: fmt.Sprintf("%d:%d %s", os.Getuid(), os.Getgid(), wd)}
	},
	// fill PATH BYTES writes BYTES zero bytes to PATH (until an error).
	"fill": func(args []string) report {
		f, err := os.Create(args[0])
		if err != nil {
			return result(err)
		}
		defer f.Close()
		buf := make([]byte, 64<<10)
		for n := atoi(args[1]); n > 0; n -= len(buf) {
			if _, err := f.Write(buf[:min(n, len(buf))]); err != nil {
				return result(err)
			}
		}
		return result(nil)
	},
	// env NAME: value is the variable's value.
	"env": func(args []string) report { return report{OK: true, Value: os.Getenv(args[0])} },
	"keyctl": func([]string) report {
		_, err := unix.KeyctlJoinSessionKeyring("airlock")
		return result(err)
	},
	"bpf": func([]string) report {
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		return result(rawErr(e))
	},
	"perf": func([]string) report {
		_, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
		return result(rawErr(e))
	},
	"userfaultfd": func([]string) report {
		_, _, e := unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
		return result(rawErr(e))
	},
	"io-uring": func([]string) report {
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
		return result(rawErr(e))
	},
	"clone3": func([]string) report {
		_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
		return result(rawErr(e))
	},
	"socket-packet": func([]string) report {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	},
	"socket-raw": func([]string) report {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	},
	"socket-mptcp": func([]string) report {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 262)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	},
	"socket-netlink-audit": func([]string) report {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	},
	"socket-tcp": func([]string) report {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	},
	"tiocsti": func(args []string) report {
		return result(tiocsti(args))
	},
	"int80": func([]string) report {
		// getpid through the i386 entry point; the filter must kill us.
		pid := int80getpid()
		return report{OK: true, Value: strconv.Itoa(int(pid))}
	},
	"setuid-root": func([]string) report { return result(unix.Setresuid(0, 0, 0)) },
	"caps": func([]string) report {
		b, err := os.ReadFile("/proc/self/status")
		r := result(err)
		r.Value = string(b)
		return r
	},
	"connect": func(args []string) report {
		sa := &unix.SockaddrInet4{Port: atoi(args[0])}
		copy(sa.Addr[:], []byte{127, 0, 0, 1})
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Connect(fd, sa))
	},
	// Resource consumers.
	"balloon": func(args []string) report {
		n := atoi(args[0]) << 20
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			b[i] = 1
		}
		return report{OK: true}
	},
	"fds": func([]string) report {
		var err error
		n := 0
		for {
			_, err = unix.Open("/dev/null", unix.O_RDONLY, 0)
			if err != nil {
				break
			}
			n++
		}
		fmt.Println(`{"ok":true,"value":"` + strconv.Itoa(n) + `"}`)
		// Hold the descriptors. Not time.Sleep: the runtime's timers need
		// one more descriptor, and there is none left.
		for {
			_ = unix.Pause()
		}
	},
	"spin": func([]string) report {
		//lint:ignore SA5002 burning CPU is what spin is for
		for {
		}
	},
	// Host-wide kernel counts: each takes what it can, prints its report
	// and holds it until killed, for the host to look meanwhile.
	"hold-inotify": func([]string) report { return hold(inotifyHog()) },
	"hold-ptys": func([]string) report {
		n := 0
		var err error
		for n < 5000 {
			if _, err = unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0); err != nil {
				break
			}
			n++
		}
		return hold(report{OK: true, Value: strconv.Itoa(n), Errno: errnoOf(err)})
	},
	"io-setup": func(args []string) report {
		return result(rawErr(ioSetup(atoi(args[0]))))
	},
	"hold-tcp":            func(args []string) report { return hold(tcpHog(atoi(args[0]))) },
	"hold-tcp-unaccepted": func(args []string) report { return hold(tcpUnacceptedHog(atoi(args[0]))) },
}

// hold prints rep and waits to be killed, holding what it took.
func hold(rep report) report {
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	for {
		_ = unix.Pause()
	}
}

// inotifyHog opens inotify instances until refused, then adds watches on
// the files under /usr to each, until refused. Its value is
// "INSTANCES WATCHES" and its errno the refusal of the watches.
func inotifyHog() report {
	var fds []int
	var ierr error
	for len(fds) < 5000 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			ierr = err
			break
		}
		fds = append(fds, fd)
	}
	if len(fds) == 0 {
		return result(ierr)
	}
	var paths []string
	_ = filepath.WalkDir("/usr", func(p string, d os.DirEntry, err error) error {
		if err == nil && len(paths) < 20000 {
			paths = append(paths, p)
		}
		return nil
	})
	watches := 0
	var werr error
	for _, fd := range fds {
		for _, p := range paths {
			if _, err := unix.InotifyAddWatch(fd, p, unix.IN_MODIFY); err != nil {
				if err == unix.ENOSPC {
					werr = err
					break
				}
				continue // unreadable, say
			}
			watches++
		}
		if werr != nil {
			break
		}
	}
	return report{OK: true, Value: fmt.Sprintf("%d %d", len(fds), watches), Errno: errnoOf(werr)}
}

// tcpHog makes n pairs of loopback TCP connections and fills each with
// data its receiver never reads. Its value is the bytes written.
func tcpHog(n int) report {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return result(err)
	}
	lo := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(l, lo); err != nil {
		return result(err)
	}
	if err := unix.Listen(l, 1024); err != nil {
		return result(err)
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		return result(err)
	}
	buf := make([]byte, 1<<16)
	total := 0
	for range n {
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return result(err)
		}
		if err := unix.Connect(c, sa); err != nil {
			return result(err)
		}
		if _, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC); err != nil {
			return result(err)
		}
		_ = unix.SetNonblock(c, true)
		for {
			w, err := unix.Write(c, buf)
			if err != nil || w <= 0 {
				break
			}
			total += w
		}
	}
	return report{OK: true, Value: strconv.Itoa(total)}
}

// tcpUnacceptedHog connects n loopback clients to listeners with the
// largest receive buffers it may set, which it never accepts, and fills
// each connection until it takes no more: data queued on a connection not
// accepted yet is charged to no cgroup.
func tcpUnacceptedHog(n int) report {
	buf := make([]byte, 1<<16)
	total := 0
	var sa unix.Sockaddr
	for i := range n {
		if i%64 == 0 {
			l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return result(err)
			}
			_ = unix.SetsockoptInt(l, unix.SOL_SOCKET, unix.SO_RCVBUF, 64<<20)
			if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return result(err)
			}
			if err := unix.Listen(l, 128); err != nil {
				return result(err)
			}
			if sa, err = unix.Getsockname(l); err != nil {
				return result(err)
			}
		}
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return result(err)
		}
		if err := unix.Connect(c, sa); err != nil {
			return result(err)
		}
		_ = unix.SetNonblock(c, true)
		for {
			w, err := unix.Write(c, buf)
			if err != nil || w <= 0 {
				break
			}
			total += w
		}
	}
	return report{OK: true, Value: strconv.Itoa(total)}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprog: bad number", s)
		os.Exit(2)
	}
	return n
}

func tiocsti(args []string) error {
	ptmx, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ptmx)
	c := byte('x')
	req := uintptr(unix.TIOCSTI)
	if len(args) > 0 && args[0] == "high" {
		// The kernel truncates the request to 32 bits; a filter comparing
		// all 64 would miss this.
		req |= 1 << 32
	}
	return rawErr(ioctlByte(ptmx, req, &c))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testprog ATTACK [ARG...]")
		os.Exit(2)
	}
	f, ok := attacks[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "testprog: unknown", os.Args[1])
		os.Exit(2)
	}
	b, _ := json.Marshal(f(os.Args[2:]))
	fmt.Println(string(b))
}
