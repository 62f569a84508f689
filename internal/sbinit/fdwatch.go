package sbinit

import (
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/initproto"
)

// While commands run, init looks for a process holding as many
// descriptors as the ceiling lets it fdWatchEvery after a command's
// start, then at intervals that double up to fdWatchMax: a session's
// long-lived command (a code interpreter's kernel) costs the guest a
// wake-up a second, not twenty.
const (
	fdWatchEvery = 50 * time.Millisecond
	fdWatchMax   = time.Second
)

// fdWatch finds, under gVisor, the breach of the descriptor ceiling that
// the namespace backend's host finds itself (sandbox's fdHolder): a
// process of the sandbox whose descriptor table holds the highest number
// the ceiling allows, and as many descriptors as the ceiling. The
// commands' descriptors are the guest kernel's there, out of the host's
// sight; init, in the guest, sees them in the guest's /proc, and tells
// the host (initproto.KindDescriptors), which ends the sandbox and names
// the breach. The guest kernel enforces the ceiling (RLIMIT_NOFILE)
// either way; this only names it.
//
// Init looks with the commands' uid as its effective one, so it sees
// the descriptors of every process of theirs that is dumpable: one that
// made itself not dumpable still meets the ceiling, unnamed.
type fdWatch struct {
	ceiling int
	// last is the highest descriptor number the ceiling allows, as the
	// name of its entry in /proc/PID/fd.
	last string
	// next is when the next look is due, every the interval after it.
	next  time.Time
	every time.Duration
	// sent is set once the breach is told: the host ends the sandbox.
	sent bool
}

// newFDWatch makes the watch for the ceiling init was started with (its
// hard RLIMIT_NOFILE, which the commands inherit), or nil when there is
// none to watch.
func newFDWatch() *fdWatch {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Max == 0 || rl.Max > 1<<20 {
		return nil
	}
	return &fdWatch{ceiling: int(rl.Max), last: strconv.FormatUint(rl.Max-1, 10)}
}

// wait is how long serve may wait before the next look, in milliseconds
// (epoll_wait's timeout), given its own timeout (-1 for none).
func (w *fdWatch) wait(now time.Time, timeout int) int {
	ms := max(int(w.next.Sub(now).Milliseconds()), 0)
	if timeout < 0 || ms < timeout {
		return ms
	}
	return timeout
}

// started makes the next look due fdWatchEvery after a command's start
// (running says whether others ran already): a short command costs no
// look.
func (w *fdWatch) started(now time.Time, running bool) {
	w.every = fdWatchEvery
	if at := now.Add(w.every); !running || at.Before(w.next) {
		w.next = at
	}
}

// look looks when a look is due, and tells the host of a breach.
func (w *fdWatch) look(now time.Time) {
	if w.sent || now.Before(w.next) {
		return
	}
	pid, n := w.holder()
	if n == 0 {
		w.every = min(2*w.every, fdWatchMax)
		w.next = now.Add(w.every)
		return
	}
	w.sent = true
	_ = initproto.Send(ctrlFD, &initproto.Message{Kind: initproto.KindDescriptors, Pid: pid, Count: n}, nil)
}

// holder returns a process of the sandbox, other than init, that holds
// the ceiling's worth of descriptors, and how many it holds (0 for none).
func (w *fdWatch) holder() (pid, n int) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil || p <= 1 {
			continue
		}
		dir := "/proc/" + name + "/fd/"
		var st unix.Stat_t
		if unix.Lstat(dir+w.last, &st) != nil {
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		fds, _ := f.Readdirnames(-1)
		f.Close()
		if len(fds) >= w.ceiling {
			return p, len(fds)
		}
	}
	return 0, 0
}
