// Package timerslack gives the Go runtime's monitor thread (sysmon) of
// the calling process a timer slack of its own.
//
// The monitor wakes every 20 µs while any goroutine runs, and on each
// wake-up hands the processor of a goroutine blocked in a system call for
// longer than that to another thread. A process that makes long system
// calls back to back (clone, unshare, mkdir in cgroupfs: an airlock host
// creating sandboxes) pays for it twice: the monitor's own wake-ups, each
// two context switches, and the thread start-ups and parkings its
// hand-offs cause. With the kernel's default slack of 50 µs, a 4-worker
// create → run → destroy loop saw 11 monitor wake-ups and about 100
// context switches per sandbox. With a slack of a millisecond the kernel
// wakes it alongside other timers, at most that late, and the loop used
// 10 % less CPU per sandbox.
//
// Nothing else changes: every other thread keeps its slack, so the
// process's timers and sleeps fire as before. The monitor's duties come at
// most the slack later: a processor held by a blocked system call is
// handed over after about a millisecond instead of 20 µs (the other
// processors run meanwhile), and a goroutine running for 10 ms is
// preempted at 10 to 11.
//
// The runtime does not name the monitor's thread. It is the one thread
// that sleeps in nanosleep(2) (the runtime's usleep); every other sleeps
// on a futex or in epoll. Set looks for a thread found alone in nanosleep
// several times in a row, while the caller's goroutine runs (the monitor sleeps on a
// futex instead once every processor was idle, until woken; see
// findMonitor).
package timerslack

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned when no thread was seen alone in nanosleep
// sightings times in a row.
var ErrNotFound = errors.New("timerslack: the runtime's monitor thread was not found")

// attempts bounds the search: each reads every thread's /proc syscall
// file once, a few microseconds per thread. A thread must be the only one
// in nanosleep at sightings looks in a row: other threads sleep there for
// a few microseconds now and then (a spinning worker, the collector's),
// the monitor for 20 µs to 10 ms at a time.
const (
	attempts  = 400
	sightings = 4
	// searches bounds findMonitor's searches.
	searches = 4
)

// SetMonitor sets the timer slack of the Go runtime's monitor thread of
// this process, and returns that thread's id. Writing another thread's
// slack needs CAP_SYS_NICE.
func SetMonitor(slack time.Duration) (int, error) {
	if slack <= 0 {
		return 0, fmt.Errorf("timerslack: slack %v must be positive", slack)
	}
	tid, err := findMonitor()
	if err != nil {
		return 0, err
	}
	if err := Set(tid, slack); err != nil {
		return 0, err
	}
	return tid, nil
}

// Set sets the timer slack of thread tid of this process.
func Set(tid int, slack time.Duration) error {
	p := "/proc/" + strconv.Itoa(tid) + "/timerslack_ns"
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("timerslack: %w", &os.PathError{Op: "open", Path: p, Err: err})
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(strconv.FormatInt(slack.Nanoseconds(), 10))); err != nil {
		return fmt.Errorf("timerslack: %w", &os.PathError{Op: "write", Path: p, Err: err})
	}
	return nil
}

// Get returns the timer slack of thread tid of this process.
func Get(tid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns")
	if err != nil {
		return 0, fmt.Errorf("timerslack: %w", err)
	}
	n, err := strconv.ParseInt(string(trimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timerslack: parse %q: %w", b, err)
	}
	return time.Duration(n), nil
}

// findMonitor looks for the monitor; when it is not found, it runs a
// garbage collection and looks again, searches times at most. A monitor
// that found every processor idle sleeps on a futex, not in nanosleep,
// until something wakes it, and a goroutine that merely runs does not:
// starting the world after a collection does, and the monitor then sleeps
// in nanosleep again for as long as a processor is busy (this search's).
// On a loaded host other threads are seen in nanosleep beside it more
// often, and one search may not find it alone four times in a row.
func findMonitor() (int, error) {
	var tid int
	var err error
	for range searches {
		if tid, err = searchMonitor(); !errors.Is(err, ErrNotFound) {
			return tid, err
		}
		runtime.GC()
	}
	return tid, err
}

func searchMonitor() (int, error) {
	self := unix.Gettid()
	prev, streak := -1, 0
	var buf [64]byte
	for range attempts {
		tids, err := threads()
		if err != nil {
			return 0, err
		}
		found := -1
		for _, tid := range tids {
			if tid == self {
				continue
			}
			if nr, ok := syscallOf(tid, buf[:]); ok && nr == unix.SYS_NANOSLEEP {
				if found != -1 {
					// Two at once: one of them is a worker's brief
					// sleep; look again.
					found = -2
					break
				}
				found = tid
			}
		}
		if found >= 0 && found == prev {
			if streak++; streak == sightings {
				return found, nil
			}
		} else {
			streak = 1
		}
		prev = found
	}
	return 0, ErrNotFound
}

// threads lists the thread ids of this process.
func threads() ([]int, error) {
	f, err := os.Open("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("timerslack: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("timerslack: %w", err)
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// syscallOf returns the number of the system call thread tid is blocked
// in, from /proc's syscall file ("35 0x... ..."; "running" or "-1 ..."
// when it is in none).
func syscallOf(tid int, buf []byte) (uintptr, bool) {
	fd, err := unix.Open("/proc/self/task/"+strconv.Itoa(tid)+"/syscall", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil || n == 0 {
		return 0, false
	}
	return parseSyscall(buf[:n])
}

// parseSyscall parses the first field of a /proc syscall file.
func parseSyscall(b []byte) (uintptr, bool) {
	end := 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	if end == 0 || end > 4 || (end < len(b) && b[end] != ' ' && b[end] != '\n') {
		return 0, false
	}
	nr, err := strconv.Atoi(string(b[:end]))
	if err != nil {
		return 0, false
	}
	return uintptr(nr), true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
