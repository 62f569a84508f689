package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/image/unpack"
	"golang.org/x/sys/unix"
)

// writeTree writes the directory tree at dirfd to w as a tar stream, in a
// fixed order (so the same tree always gives the same digest). It never
// follows a symlink: every step is relative to a descriptor of a directory
// already inside, opened with O_NOFOLLOW, so a tree that changes while it
// is read cannot make airlock read a file elsewhere on the host.
func writeTree(dirfd int, w io.Writer) error {
	t := &treeWriter{tw: tar.NewWriter(w), links: make(map[inodeKey]string)}
	if err := t.dir(dirfd, "", 0); err != nil {
		return err
	}
	return t.tw.Close()
}

// treeWriter writes one tree. links maps a file with more than one link
// to the first name it was written under, so later names become hardlinks
// (as in a tarball) instead of copies.
type treeWriter struct {
	tw    *tar.Writer
	links map[inodeKey]string
}

// maxTreeDepth bounds the recursion over a root file system directory.
const maxTreeDepth = 256

type inodeKey struct{ dev, ino uint64 }

func (t *treeWriter) dir(dirfd int, prefix string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested more than %d deep", prefix, maxTreeDepth)
	}
	names, err := unpack.ReadNames(dirfd)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		if err := t.entry(dirfd, n, prefix+n, depth); err != nil {
			return err
		}
	}
	return nil
}

func header(st *unix.Stat_t, name string) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		Format:  tar.FormatPAX,
	}
}

func (t *treeWriter) entry(dirfd int, base, name string, depth int) error {
	tw := t.tw
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	h := header(&st, name)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer unix.Close(fd)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return t.dir(fd, name+"/", depth+1)
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, base, buf)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:n])
		return tw.WriteHeader(h)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			key := inodeKey{uint64(st.Dev), st.Ino}
			if first, ok := t.links[key]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return tw.WriteHeader(h)
			}
			t.links[key] = name
		}
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev || now.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s: changed while being read", name)
		}
		h.Typeflag, h.Size = tar.TypeReg, now.Size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(f, now.Size))
		if err == nil && n != now.Size {
			err = errors.New("changed while being read")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		// Passed on for the unpacker to skip and count.
		h.Typeflag = map[uint32]byte{unix.S_IFCHR: tar.TypeChar, unix.S_IFBLK: tar.TypeBlock, unix.S_IFIFO: tar.TypeFifo}[st.Mode&unix.S_IFMT]
		return tw.WriteHeader(h)
	}
	return nil // sockets have no place in an image
}
