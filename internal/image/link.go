package image

import (
	"fmt"

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
func linkTree(src, dst int, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("directories nested more than %d deep", maxTreeDepth)
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
			buf := make([]byte, unpack.MaxName+1)
			k, err := unix.Readlinkat(src, n, buf)
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if err := unix.Symlinkat(string(buf[:k]), dst, n); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if err := unix.Fchownat(dst, n, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if err := unix.UtimesNanoAt(dst, n, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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
			err = linkTree(sfd, dfd, depth+1)
			if err == nil {
				err = sameMeta(dfd, &st)
			}
			unix.Close(sfd)
			unix.Close(dfd)
			if err != nil {
				return fmt.Errorf("%s/%w", n, err)
			}
		}
		// Nothing else is stored: the unpacker skips devices and FIFOs.
	}
	return nil
}

// sameMeta gives the directory fd st's owner, mode and times (last, as
// its entries change its mtime).
func sameMeta(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_EMPTY_PATH)
}
