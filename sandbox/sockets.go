package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/sockdiag"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// Socket buffers. The host's TCP memory (net.ipv4.tcp_mem) is one count
// for every TCP socket on the host, a few percent of its memory by
// default (here 1.5 GiB to pressure, 2.2 GiB hard, of 24 GiB), far below
// what the sandboxes' memory ceilings add up to (80% of it). Sandboxes
// holding loopback pairs they never read pushed it past its hard limit,
// and then every TCP socket on the host stalled, sshd's and the daemon's
// API included. So on v1, where a cgroup counts its socket buffers apart
// from its memory, the kernel holds them to a share of the host's TCP
// memory: all sandboxes together to half of tcp_mem's pressure threshold
// (the cgroup parent's limit, which the kernel enforces on the sum), and
// each sandbox to the part of it that its memory ceiling is of the
// node's memory budget (so that one sandbox cannot take every other's).
// On v2 a sandbox's socket buffers count in its memory ceiling and there
// is no limit of their own: each sandbox's TCP sockets are read (as its
// unaccepted connections are, below) and the sandbox ended past its share,
// a burst between two readings passing it.

const (
	// unheldDiv: a sandbox's connections not accepted yet may hold
	// 1/unheldDiv of its share, so that with its charged sockets at
	// their share too the sandboxes together stay at 3/4 of tcp_mem's
	// pressure threshold.
	unheldDiv = 2
	// socketsEvery is how often the monitor reads them: a burst
	// between two readings is what passes the bound.
	socketsEvery = 50 * time.Millisecond
	// watchEvery is how often they are read while no command runs.
	watchEvery = 100 * time.Millisecond
	// socketShareDiv: the sandboxes' socket buffers together get
	// tcp_mem[1]/socketShareDiv; the rest is the host's own.
	socketShareDiv = 2
	// minSocketShare is the least one sandbox gets, for a few
	// connections at full speed.
	minSocketShare = 1 << 20
)

// SocketCeiling is the socket buffer memory every sandbox together may
// hold, in bytes: half of the host's TCP pressure threshold (tcp_mem[1]).
// On cgroup v1 the kernel holds them to it; on v2 only each sandbox's
// memory ceiling bounds its own (airlock doctor says so).
func SocketCeiling() (int64, error) { return socketCeiling() }

func socketCeiling() (int64, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) != 3 {
		return 0, fmt.Errorf("net.ipv4.tcp_mem %q: want three numbers", bytes.TrimSpace(b))
	}
	pressure, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil || pressure <= 0 {
		return 0, fmt.Errorf("net.ipv4.tcp_mem %q: bad pressure threshold", bytes.TrimSpace(b))
	}
	return pressure * int64(os.Getpagesize()) / socketShareDiv, nil
}

// socketShare is the socket buffer ceiling of a sandbox with a memory
// ceiling of memory: the part of all (the sandboxes' socket ceiling) that
// memory is of budget (the node's memory budget, or the host's memory),
// so that the shares of sandboxes the budget admits add up to all at
// most. 0 is no ceiling of its own (no ceiling at all).
func socketShare(memory, budget, all int64) int64 {
	if all <= 0 || memory <= 0 || budget <= 0 {
		return 0
	}
	share := int64(float64(all) * (float64(memory) / float64(budget)))
	return min(max(share, minSocketShare), all)
}

// setSocketCeiling bounds the socket buffers of every sandbox under the
// cgroup parent together (v1), or warns when nothing can (v2 with a
// memory budget over the share). It returns the ceiling, 0 when there is
// none to share.
func (rt *Runtime) setSocketCeiling() int64 {
	all, err := socketCeiling()
	if errors.Is(err, fs.ErrNotExist) {
		// A network namespace other than the host's shows no tcp_mem
		// (the count is the host's, kept by its first namespace): a
		// one-shot run started in one (a test's, a container's) has no
		// share to take, and nothing to say on its output about it.
		rt.opts.Logger.Debug("the host's TCP memory is not visible from this network namespace; sandboxes' socket buffers are bounded by their memory ceilings only")
		return 0
	}
	if err != nil {
		rt.opts.Logger.Warn("the host's TCP memory could not be read; sandboxes' socket buffers are bounded by their memory ceilings only", "err", err)
		return 0
	}
	if !rt.opts.OneShot {
		// The readings that bound unaccepted connections (and on v2
		// every socket) need the kernel's TCP sock_diag, a module on
		// some kernels (tcp_diag): said at start, not at the first
		// sandbox that would have needed it.
		if err := probeSockDiag(); err != nil {
			rt.opts.Logger.Warn("the kernel's TCP socket diagnostics cannot be read (load the tcp_diag module): sandboxes' connections not accepted yet, and on cgroup v2 their sockets, are not held to their share of the host's TCP memory", "err", err)
		}
	}
	set, err := rt.cg.SetSocketCeiling(all)
	switch {
	case err != nil:
		rt.opts.Logger.Warn("the sandboxes' socket buffer ceiling could not be set; each sandbox's own still holds", "err", err)
	case !set && rt.cg.Version() == cgroup.V2 && !rt.opts.OneShot && (rt.opts.Budget.Memory == 0 || rt.opts.Budget.Memory > all):
		// v2 has no socket limit of its own: each sandbox's share is
		// held by reading its sockets (socketUsage) while it lives, a
		// burst between two readings passing it.
		rt.opts.Logger.Info("on cgroup v2 each sandbox's TCP socket buffers are held to its share of the host's TCP memory by readings every 50-100 ms",
			"memory_budget", units.FormatSize(rt.opts.Budget.Memory), "socket_share", units.FormatSize(all))
	}
	return all
}

// probeSockDiag reads the TCP sockets of the daemon's own network
// namespace owned by a uid no one has, to learn whether the readings
// work at all.
func probeSockDiag() error {
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer ns.Close()
	_, err = sockdiag.TCP(ns, 1<<32-2, 1<<32-2, sockdiag.IPv4)
	return err
}

// socketDenominator is what a sandbox's memory ceiling is a part of: the
// node's memory budget, or the host's memory when there is none.
func (rt *Runtime) socketDenominator() int64 {
	if b := rt.opts.Budget.Memory; b > 0 {
		return b
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// socketUsage reads the sandbox's socket buffers against its bounds:
// those of its connections not accepted yet (Sandbox.unheld), and on v2,
// where no limit of the kernel's holds them apart from its memory, those
// of all its TCP sockets (Sandbox.allSockets, its share of the host's TCP
// memory). It returns what it read of the first bound passed (else of
// the unaccepted), that bound, and whether it was passed.
func (s *Sandbox) socketUsage() (n, bound int64, over bool) {
	if s.unheld <= 0 || s.netns == nil || s.ids == nil {
		return 0, 0, false
	}
	families := sockdiag.Both
	if v4, v6, ok := tcpInUse(s.netPid()); ok {
		// No TCP socket of a family in the namespace holds a buffer:
		// nothing of it to read. A reading walks the namespace's TCP
		// table once a family (see netns.ChildEhashEntries), a
		// sandbox at rest every 100 ms; this costs microseconds.
		families = 0
		if v4 > 0 {
			families |= sockdiag.IPv4
		}
		if v6 > 0 {
			families |= sockdiag.IPv6
		}
		if families == 0 {
			return 0, s.unheld, false
		}
	}
	u, err := sockdiag.TCP(s.netns, s.ids.base, s.ids.base+idRangeSize-1, families)
	if err != nil {
		// Without the reading the bound on unaccepted connections is
		// gone: said once a runtime (a kernel without sock_diag's TCP
		// module, say), not once a reading.
		s.rt.sockdiagFailed.Do(func() {
			s.rt.opts.Logger.Warn("the sandboxes' connections not accepted yet cannot be read (sock_diag); their socket buffers are not bounded", "err", err)
		})
		return 0, 0, false
	}
	if u.Unheld > s.unheld {
		return u.Unheld, s.unheld, true
	}
	if s.allSockets > 0 && u.Bytes > s.allSockets {
		return u.Bytes, s.allSockets, true
	}
	return u.Unheld, s.unheld, false
}

// watchSockets reads the sandbox's connections not accepted yet while no
// command runs, from the end of the first command that left it running
// (a session's: what it started in the background lives on) until init is
// gone, and kills the sandbox past its bound: there is no command whose
// result could name the breach, so the sandbox is gone for the next one,
// and the log says why.
func (s *Sandbox) watchSockets() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-s.dead:
			return
		case <-t.C:
		}
		if s.running.Load() > 0 {
			continue // the command's monitor reads them, and names a breach
		}
		if !s.watchReading() {
			return
		}
	}
}

// watchReading is one reading of watchSockets. It counts as an exec, so
// that Destroy's teardown (which closes the namespace it reads) waits for
// it; it reports false once the sandbox is killed.
func (s *Sandbox) watchReading() bool {
	s.mu.Lock()
	if s.killed {
		s.mu.Unlock()
		return false
	}
	s.execs.Add(1)
	s.mu.Unlock()
	defer s.execs.Done()
	if n, bound, over := s.socketUsage(); over {
		if s.running.Load() > 0 {
			// A command started while it read: its monitor reads
			// them too, and names the breach in its result.
			return true
		}
		s.rt.opts.Logger.Warn("sandbox killed: its connections not accepted yet hold more socket buffer memory than it may (they are charged to no cgroup)",
			"sandbox", s.id, "bytes", n, "bound", bound)
		s.kill()
		return false
	}
	return true
}

// checkSockets ends the sandbox when the connections of its network
// namespace that no process of it has accepted carry more socket buffer memory
// than it may (Sandbox.unheld). The kernel charges a socket's buffers to
// the cgroup of the process that created or accepted it, so a connection
// not accepted yet is charged to none: a 64 MiB group's listeners with
// 200 such connections held 1.07 GiB of the host's TCP memory while the
// group's own count saw 33 MiB. Only this reading bounds them, between
// two readings a burst may pass it. It reports whether it found a breach.
func (x *execution) checkSockets() bool {
	n, bound, over := x.s.socketUsage()
	if over {
		x.setBreach(&result.Limit{Name: result.LimitMemory, Ceiling: bound, Observed: n, Unit: result.UnitBytes})
	}
	return over
}

// tcpInUse is how many IPv4 and IPv6 TCP sockets the network namespace
// of pid has in its tables, from its sockstat files: listening, connected
// and connections not accepted yet, each of which is counted while it is
// hashed; a socket that is not there (never bound or connected, or in
// TIME_WAIT) holds no buffer. ok is false when they could not be read,
// and the caller then reads the sockets themselves.
func tcpInUse(pid int) (v4, v6 int64, ok bool) {
	var n [2]int64
	for i, f := range [...]struct{ file, prefix string }{{"sockstat", "TCP: inuse "}, {"sockstat6", "TCP6: inuse "}} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f.file)
		if err != nil {
			return 0, 0, false
		}
		v, found := sockstatInUse(b, f.prefix)
		if !found {
			return 0, 0, false
		}
		n[i] = v
	}
	return n[0], n[1], true
}

// sockstatInUse reads the count after prefix ("TCP: inuse ") in a
// sockstat file.
func sockstatInUse(b []byte, prefix string) (int64, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte(prefix))
		if !ok {
			continue
		}
		if i := bytes.IndexByte(rest, ' '); i >= 0 {
			rest = rest[:i]
		}
		n, err := strconv.ParseInt(string(rest), 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
