package cgroup

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Small file helpers built on raw system calls. The os package would do,
// but on the sandbox hot path it costs an extra fstat and a netpoller
// registration attempt per open, and the v1 thread move must run on the
// calling thread without any chance of the runtime switching threads in
// the middle (raw syscalls keep it to one open, one write, one close).

// writeFile writes data to an existing cgroup file in one write(2).
// Cgroup files interpret each write as one command, so a short or split
// write would be a different command; the kernel never splits them.
func writeFile(path, data string) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if err := writeFD(fd, data); err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// writeFD writes data to fd in one write(2), again on EINTR.
func writeFD(fd int, data string) error {
	for {
		_, err := unix.Write(fd, []byte(data))
		if err != unix.EINTR {
			return err
		}
	}
}

// readFile reads a small file into buf and returns the bytes read.
// Cgroup and /proc files produce their content on each read and are a
// few hundred bytes at most; one read is enough for everything read here.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := preadRetry(fd, buf)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// preadRetry reads from offset 0. On a seq_file-backed cgroup file, a read
// at offset 0 makes the kernel regenerate the content, which is what lets a
// kept descriptor be polled without reopening it.
func preadRetry(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Pread(fd, buf, 0)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// exists reports whether path exists; it is used to probe for files that
// only newer kernels (or enabled features such as swap accounting) have.
func exists(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil
}

// rmdirIfExists removes one cgroup directory, treating "already gone" as
// success.
func rmdirIfExists(path string) error {
	err := unix.Rmdir(path)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	return &fs.PathError{Op: "rmdir", Path: path, Err: err}
}

// isNotExist also recognizes the bare errno the raw helpers produce.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT)
}

// backoff sleeps for an exponentially growing interval, bounded by ctx.
// Waiting for processes to exit usually takes well under a millisecond,
// so it starts short, but grows to keep a long wait from burning a CPU.
type backoff struct {
	d time.Duration
}

const (
	backoffMin = 50 * time.Microsecond
	backoffMax = 5 * time.Millisecond
)

func (b *backoff) wait(ctx context.Context) error {
	if b.d == 0 {
		b.d = backoffMin
	}
	d := b.d
	b.d = min(2*b.d, backoffMax)
	if err := ctx.Err(); err != nil {
		return err
	}
	if d < time.Millisecond {
		// Go timers fire about a millisecond late on an otherwise idle
		// runtime, ten times longer than a killed process usually takes
		// to go. A short nanosleep blocks this thread instead, which the
		// scheduler tolerates for waits this short; ctx is checked before
		// each one.
		ts := unix.NsecToTimespec(int64(d))
		_ = unix.Nanosleep(&ts, nil)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// readMountInfo returns the calling process's mount table.
func readMountInfo() ([]mountEntry, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(data), nil
}
