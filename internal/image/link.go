package image

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/image/unpack"
)

// linkTree fills the empty directory dst with the stored tree src
// (descriptors of both): its directories made anew, with their owners,
// modes and times; its symlinks made anew; its regular files hardlinked,
// not copied. Stored images are never written to, and the unpacker
// replaces a file rather than writing into it (a new inode for each
// entry), so a derived image that shares its parent's unchanged files
// changes none of them. Nothing is followed: every step is relative to
// a descriptor opened with O_NOFOLLOW.
func linkTree(src, dst int) error {
	l := &linker{sem: make(chan struct{}, linkWorkers)}
	err := l.tree(src, dst, 0)
	l.wg.Wait()
	if err != nil {
		return err
	}
	return l.firstErr()
}

// linkWorkers bounds the directories linked at once beside the caller:
// the file system's inode allocation, not the CPU, is what a tree's
// links wait on, and several at once overlap it.
const linkWorkers = 4

// linker links one tree: a subdirectory on a goroutine of its own while
// a worker is free, else in line.
type linker struct {
	sem chan struct{}
	wg  sync.WaitGroup
	mu  sync.Mutex // guards err
	err error
}

func (l *linker) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

func (l *linker) firstErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// tree makes src's entries in dst, then its subdirectories' (a
// directory's owner, mode and times are set once its own entries are
// made: what is made below it later does not change them).
func (l *linker) tree(src, dst int, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("directories nested more than %d deep", maxTreeDepth)
	}
	if err := l.firstErr(); err != nil {
		return err
	}
	names, err := unpack.ReadNames(src)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(src, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if err := unix.Linkat(src, n, dst, n, 0); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case unix.S_IFLNK:
			if err := linkSymlink(src, dst, n, &st); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case unix.S_IFDIR:
			if err := unix.Mkdirat(dst, n, 0o700); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			sfd, err := unix.Openat(src, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			dfd, err := unix.Openat(dst, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(sfd)
				return fmt.Errorf("%s: %w", n, err)
			}
			st := st
			sub := func() error {
				defer unix.Close(sfd)
				defer unix.Close(dfd)
				err := l.tree(sfd, dfd, depth+1)
				if err == nil {
					err = sameMeta(dfd, &st)
				}
				if err != nil {
					return fmt.Errorf("%s/%w", n, err)
				}
				return nil
			}
			select {
			case l.sem <- struct{}{}:
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					defer func() { <-l.sem }()
					if err := sub(); err != nil {
						l.fail(err)
					}
				}()
			default:
				if err := sub(); err != nil {
					return err
				}
			}
		}
		// Nothing else is stored: the unpacker skips devices and FIFOs.
	}
	return nil
}

func linkSymlink(src, dst int, n string, st *unix.Stat_t) error {
	buf := make([]byte, unpack.MaxName+1)
	k, err := unix.Readlinkat(src, n, buf)
	if err != nil {
		return err
	}
	if err := unix.Symlinkat(string(buf[:k]), dst, n); err != nil {
		return err
	}
	if err := unix.Fchownat(dst, n, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dst, n, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// sameMeta gives the directory fd st's owner, mode and times.
func sameMeta(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_EMPTY_PATH)
}
