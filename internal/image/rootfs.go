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
func writeTree(dirfd int, w io.Writer) error { return writeTreeOwned(dirfd, w, 0) }

// writeTreeOwned is writeTree of a tree owned from host id idBase on (a
// stored image's): owners are written as the image's own ids.
func writeTreeOwned(dirfd int, w io.Writer, idBase uint32) error {
	t := &treeWriter{tw: tar.NewWriter(w), links: make(map[inodeKey]string), idBase: idBase}
	if err := t.dir(dirfd, "", 0); err != nil {
		return err
	}
	return t.tw.Close()
}

// treeWriter writes one tree. links maps a file with more than one link
// to the first name it was written under, so later names become hardlinks
// (as in a tarball) instead of copies.
type treeWriter struct {
	tw     *tar.Writer
	links  map[inodeKey]string
	idBase uint32
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
	if t.idBase > 0 {
		if st.Uid < t.idBase || st.Gid < t.idBase {
			return fmt.Errorf("%s: owned by host ids %d:%d, below the image range %d", name, st.Uid, st.Gid, t.idBase)
		}
		h.Uid, h.Gid = int(st.Uid-t.idBase), int(st.Gid-t.idBase)
	}
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
	}
	_, err := leaf(tw, t.links, dirfd, base, name, &st, h)
	return err
}

// leaf writes what is at base in dirfd (stat st) but a directory, under
// header h, and returns the bytes of file content written: a symlink;
// a regular file (one with more than one link, whose inode links has
// seen, as a hardlink to the first name); a FIFO or device, as a header
// only (the unpacker skips and counts them). Sockets are left out. The
// file is opened without following a symlink and checked to be the one
// stat saw, so a tree changing meanwhile cannot make airlock read a
// file elsewhere.
func leaf(tw *tar.Writer, links map[inodeKey]string, dirfd int, base, name string, st *unix.Stat_t, h *tar.Header) (int64, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, base, buf)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:n])
		return 0, tw.WriteHeader(h)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			key := inodeKey{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return 0, tw.WriteHeader(h)
			}
			links[key] = name
		}
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev || now.Mode&unix.S_IFMT != unix.S_IFREG {
			return 0, fmt.Errorf("%s: changed while being read", name)
		}
		h.Typeflag, h.Size = tar.TypeReg, now.Size
		if err := tw.WriteHeader(h); err != nil {
			return 0, err
		}
		n, err := io.Copy(tw, io.LimitReader(f, now.Size))
		if err == nil && n != now.Size {
			err = errors.New("changed while being read")
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		return n, nil
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		h.Typeflag = map[uint32]byte{unix.S_IFCHR: tar.TypeChar, unix.S_IFBLK: tar.TypeBlock, unix.S_IFIFO: tar.TypeFifo}[st.Mode&unix.S_IFMT]
		return 0, tw.WriteHeader(h)
	}
	return 0, nil // sockets have no place in an image
}
