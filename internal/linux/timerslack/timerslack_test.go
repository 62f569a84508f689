package timerslack

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSyscall(t *testing.T) {
	for _, c := range []struct {
		in   string
		nr   uintptr
		isOK bool
	}{
		{"35 0xc000051f30 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x46b1c3\n", 35, true},
		{"202 0x4b7e88 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x46b1c3\n", 202, true},
		{"0\n", 0, true},
		{"running\n", 0, false},
		{"-1 0x7ffd 0x46b1c3\n", 0, false},
		{"", 0, false},
		{"35x 0x0\n", 0, false},
		{"123456 0x0\n", 0, false},
	} {
		nr, ok := parseSyscall([]byte(c.in))
		if nr != c.nr || ok != c.isOK {
			t.Errorf("parseSyscall(%q) = %d, %v; want %d, %v", c.in, nr, ok, c.nr, c.isOK)
		}
	}
}

func TestSetMonitorRejectsSlack(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Millisecond} {
		if _, err := SetMonitor(d); err == nil {
			t.Errorf("SetMonitor(%v) succeeded", d)
		}
	}
}

// TestSetMonitor checks that SetMonitor changes one thread, not the
// caller's, and that the thread it changed is the one that sleeps in
// nanosleep: the runtime's monitor.
func TestSetMonitor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_NICE) to set another thread's timer slack")
	}
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	before := map[int]time.Duration{}
	for _, tid := range tids {
		if before[tid], err = Get(tid); err != nil {
			t.Fatal(err)
		}
	}
	const slack = 1234567 * time.Nanosecond
	// An idle process: the monitor goes to sleep on a futex (it was
	// not found that way, now and then, before SetMonitor woke it).
	time.Sleep(300 * time.Millisecond)
	tid, err := SetMonitor(slack)
	if err != nil {
		t.Fatal(err)
	}
	if tid == unix.Gettid() {
		t.Fatalf("SetMonitor chose the calling thread %d", tid)
	}
	if got, err := Get(tid); err != nil || got != slack {
		t.Fatalf("thread %d's slack is %v (%v); want %v", tid, got, err, slack)
	}
	for other, was := range before {
		if other == tid {
			continue
		}
		if got, err := Get(other); err == nil && got != was {
			t.Errorf("thread %d's slack changed from %v to %v", other, was, got)
		}
	}
	// The monitor goes on sleeping in nanosleep while this goroutine
	// runs: of the system calls the thread is seen in, nanosleep is the
	// most frequent (a thread parked by the scheduler would be seen in
	// futex only). How often it is seen in one at all depends on the
	// machine's load (a runnable thread reads as running), so no share
	// of the looks is asked for, and the looking goes on until the
	// thread was seen in a system call 200 times or 5 s passed: on CI's
	// loaded two cores a woken monitor waited as runnable through all
	// of 2000 quick looks.
	var buf [64]byte
	seen := map[uintptr]int{}
	looks, total := 0, 0
	for deadline := time.Now().Add(5 * time.Second); total < 200 && time.Now().Before(deadline); looks++ {
		if nr, ok := syscallOf(tid, buf[:]); ok {
			seen[nr]++
			total++
		}
	}
	for nr, n := range seen {
		if nr != unix.SYS_NANOSLEEP && n >= seen[unix.SYS_NANOSLEEP] {
			t.Errorf("thread %d was seen in system call %d %d times, in nanosleep %d times; the monitor sleeps there: %v", tid, nr, n, seen[unix.SYS_NANOSLEEP], seen)
		}
	}
	if seen[unix.SYS_NANOSLEEP] == 0 {
		t.Errorf("thread %d was never seen in nanosleep in %d looks: %v", tid, looks, seen)
	}
	_ = Set(tid, before[tid])
}

func TestSetMissingThread(t *testing.T) {
	// A thread id that is no thread: the write fails and says where.
	err := Set(1<<22+12345, time.Millisecond)
	if err == nil {
		t.Fatal("Set on a missing thread succeeded")
	}
	if want := "/proc/" + strconv.Itoa(1<<22+12345) + "/timerslack_ns"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}
