package sandbox

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/pmtext"
	"github.com/airlockhq/airlock/result"
)

// kmsgLog follows the kernel's log from the runtime's start, for the
// out-of-memory kills its sandboxes' post-mortems name. Each post-mortem
// reads only the records written since the last one read, not the whole
// ring buffer: read from its start, a log of a few thousand records did
// not fit the post-mortem's budget in an emulated guest under load, and
// the kill went unnamed.
type kmsgLog struct {
	mu    sync.Mutex
	fd    int // -1 when the log cannot be read (err says why)
	err   error
	kills pmtext.Kills
}

// openKmsg opens the kernel's log at its end.
func openKmsg() *kmsgLog {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		// Without CAP_SYSLOG, or in a container without /dev/kmsg.
		return &kmsgLog{fd: -1, err: err}
	}
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		unix.Close(fd)
		return &kmsgLog{fd: -1, err: err}
	}
	return &kmsgLog{fd: fd}
}

func (k *kmsgLog) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd >= 0 {
		unix.Close(k.fd)
		k.fd, k.err = -1, errors.New("closed")
	}
}

// killed is the process the out-of-memory killer ended in the memory
// cgroup whose last element is id, read from the log until the
// deadline; nil if the log has no record of it (the kernel writes the
// record that names the group at most ten times in five seconds), and
// then whole reports whether the log was read to its end.
func (k *kmsgLog) killed(id string, deadline time.Time) (p *result.Process, whole bool, err error) {
	for {
		k.mu.Lock()
		if k.fd < 0 {
			k.mu.Unlock()
			return nil, false, k.err
		}
		whole = k.read(deadline)
		kill, ok := k.kills.Find(id)
		k.mu.Unlock()
		// The record that names the group is written before the kill is
		// counted; the one that names the process, after: it is waited
		// for, briefly.
		if !ok {
			return nil, whole, nil
		}
		if kill.Named || time.Now().Add(kmsgPoll).After(deadline) {
			return &kill.Process, whole, nil
		}
		time.Sleep(kmsgPoll)
	}
}

// kmsgPoll is how often a kill's second record is looked for.
const kmsgPoll = 2 * time.Millisecond

// read reads the records written since the last read, without blocking,
// bounded in number and bytes, until the deadline. It reports whether it
// reached the log's end.
func (k *kmsgLog) read(deadline time.Time) bool {
	var buf [8192]byte
	total := 0
	for range kmsgRecords {
		if total > kmsgBytes || time.Now().After(deadline) {
			return false
		}
		n, err := unix.Read(k.fd, buf[:])
		if errors.Is(err, unix.EPIPE) {
			continue // overwritten before it was read: the next one
		}
		if err != nil || n <= 0 {
			return true // EAGAIN: the end of the log
		}
		total += n
		k.kills.Record(pmtext.Message(buf[:n]))
	}
	return false
}
