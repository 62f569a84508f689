package image

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/image/unpack"
)

// A step runs in a sandbox whose root is its parent image under a
// writable upper layer (overlayfs). The host sees the merged root, not
// the upper layer, so the changes are found there: overlayfs shows an
// object of the upper layer (made or copied up by the step) with the
// upper object's attributes, and so a change time no earlier than the
// step's start, while what the step left alone keeps the image's change
// time, from its unpacking long before. A directory with anything made,
// changed or removed below it was copied up too, so a directory older
// than the step is not entered at all.

// Generated are files airlock writes into every sandbox of an image
// (sandbox.imageEtc): never part of a built image, as Docker leaves them
// out of its layers.
var Generated = map[string]bool{"etc/hosts": true, "etc/hostname": true, "etc/resolv.conf": true}

// Changes is what Capture found.
type Changes struct {
	Added, Changed, Removed int
	Bytes                   int64
}

// Capture writes to w, as an OCI layer (a tar stream with whiteouts),
// what changed under merged (a descriptor of the sandbox's root) since
// since, against parent (a descriptor of the parent image's root
// directory, read only to name what was removed). Owners are written as
// the sandbox sees them: hostBase is the host id of its uid and gid 0.
// Mount points (a directory on another device: /proc, /dev, /tmp, ...)
// and Generated files are left out. since must be read from
// CLOCK_REALTIME_COARSE (Since) after the sandbox was made.
func Capture(w io.Writer, merged, parent *os.File, since unix.Timespec, hostBase uint32) (Changes, error) {
	var root unix.Stat_t
	if err := unix.Fstat(int(merged.Fd()), &root); err != nil {
		return Changes{}, err
	}
	c := &capture{tw: tar.NewWriter(w), since: since, base: hostBase, dev: root.Dev, links: map[inodeKey]string{}}
	if err := c.dir(int(merged.Fd()), int(parent.Fd()), "", 0); err != nil {
		return c.ch, err
	}
	return c.ch, c.tw.Close()
}

// Since is now as the kernel stamps change times: its coarse clock, which
// the fine one is ahead of by a tick at most. Read it a tick after the
// sandbox was made (SettleTime), so that nothing made with the sandbox
// counts as the step's.
func Since() unix.Timespec {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts)
	return ts
}

// SettleTime is how long after a sandbox is made Since is read: over a
// tick at the slowest kernel clock (HZ=100).
const SettleTime = 25 * time.Millisecond

type capture struct {
	tw    *tar.Writer
	since unix.Timespec
	base  uint32
	dev   uint64
	links map[inodeKey]string
	ch    Changes
}

func (c *capture) newer(st *unix.Stat_t) bool {
	return st.Ctim.Sec > c.since.Sec || st.Ctim.Sec == c.since.Sec && st.Ctim.Nsec >= c.since.Nsec
}

// dir writes the changes below the directory mfd (and pfd, its parent
// image's counterpart, -1 if it has none), whose path in the image is
// prefix ("" or ending in /).
func (c *capture) dir(mfd, pfd int, prefix string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested more than %d deep", prefix, maxTreeDepth)
	}
	names, err := unpack.ReadNames(mfd)
	if err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	slices.Sort(names)
	if pfd >= 0 {
		// Removed: in the parent, no longer here.
		old, err := unpack.ReadNames(pfd)
		if err != nil {
			return fmt.Errorf("%s (the parent's): %w", prefix, err)
		}
		slices.Sort(old)
		for _, n := range old {
			if _, found := slices.BinarySearch(names, n); found || Generated[prefix+n] {
				continue
			}
			if err := c.tw.WriteHeader(&tar.Header{Name: prefix + ".wh." + n, Typeflag: tar.TypeReg, Mode: 0o600, Format: tar.FormatPAX}); err != nil {
				return err
			}
			c.ch.Removed++
		}
	}
	for _, n := range names {
		if err := c.entry(mfd, pfd, n, prefix+n, depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *capture) owner(st *unix.Stat_t, name string) (int, int, error) {
	if st.Uid < c.base || st.Uid-c.base > 65535 || st.Gid < c.base || st.Gid-c.base > 65535 {
		return 0, 0, fmt.Errorf("%s: owned by host ids %d:%d, outside the sandbox's", name, st.Uid, st.Gid)
	}
	return int(st.Uid - c.base), int(st.Gid - c.base), nil
}

func (c *capture) entry(mfd, pfd int, base, name string, depth int) error {
	if Generated[name] {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(mfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir && st.Dev != c.dev {
		return nil // a mount point: the sandbox's, not the image's
	}
	if !c.newer(&st) {
		return nil // as the parent left it, and all below it
	}
	existed := false
	var pst unix.Stat_t
	if pfd >= 0 && unix.Fstatat(pfd, base, &pst, unix.AT_SYMLINK_NOFOLLOW) == nil {
		existed = true
	}
	uid, gid, err := c.owner(&st, name)
	if err != nil {
		return err
	}
	h := &tar.Header{
		Name: name, Mode: int64(st.Mode & 0o7777), Uid: uid, Gid: gid,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(), Format: tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		fd, err := unix.Openat(mfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer unix.Close(fd)
		child := -1
		if existed && pst.Mode&unix.S_IFMT == unix.S_IFDIR {
			if child, err = unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
				return fmt.Errorf("%s (the parent's): %w", name, err)
			}
			defer unix.Close(child)
		}
		if err := c.wrote(h, existed); err != nil {
			return err
		}
		return c.dir(fd, child, name+"/", depth+1)
	}
	if existed {
		c.ch.Changed++
	} else {
		c.ch.Added++
	}
	n, err := leaf(c.tw, c.links, mfd, base, name, &st, h)
	c.ch.Bytes += n
	return err
}

func (c *capture) wrote(h *tar.Header, existed bool) error {
	if existed {
		c.ch.Changed++
	} else {
		c.ch.Added++
	}
	return c.tw.WriteHeader(h)
}
