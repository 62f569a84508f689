package image

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveUser turns the image's User ("uid", "uid:gid", "name",
// "name:group") into numbers, looking names up in the unpacked image's own
// /etc/passwd and /etc/group (read inside the root: the image's files are
// untrusted). The ids must be inside the image's range.
func resolveUser(root string, c *Config) error {
	if c.User == "" {
		return nil
	}
	user, group, hasGroup := strings.Cut(c.User, ":")
	uid, pgid, err := lookupID(root, "etc/passwd", user, true)
	if err != nil {
		return fmt.Errorf("%w: image user %q: %w", ErrInvalid, c.User, err)
	}
	gid := pgid
	if hasGroup {
		if gid, _, err = lookupID(root, "etc/group", group, false); err != nil {
			return fmt.Errorf("%w: image user %q: %w", ErrInvalid, c.User, err)
		}
	}
	c.UID, c.GID = &uid, &gid
	return nil
}

// ResolveUser resolves a user as USER or --chown give it ("uid",
// "uid:gid", "name", "name:group") in the image root's own /etc/passwd
// and /etc/group (a build step's image).
func ResolveUser(root, user string) (uid, gid uint32, err error) {
	c := Config{User: user}
	if err := resolveUser(root, &c); err != nil {
		return 0, 0, err
	}
	return *c.UID, *c.GID, nil
}

// lookupID resolves a number or a name in an /etc/passwd- or /etc/group-
// style file. For passwd it also returns the user's primary group.
func lookupID(root, file, name string, passwd bool) (uint32, uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		if n >= 65536 {
			return 0, 0, fmt.Errorf("id %d is outside the image's ids 0-65535", n)
		}
		gid := uint32(n)
		if passwd {
			// A numeric user without a group gets its passwd entry's
			// group if there is one, else the same number.
			if _, g, err := lookupName(root, file, name, true); err == nil {
				gid = g
			}
		}
		return uint32(n), gid, nil
	}
	return lookupName(root, file, name, passwd)
}

func lookupName(root, file, name string, byID bool) (uint32, uint32, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, file, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return 0, 0, fmt.Errorf("/%s: %w", file, err)
	}
	f := os.NewFile(uintptr(fd), file)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("/%s is not a regular file", file)
	}
	sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		match := fields[0] == name
		if byID && !match {
			match = fields[2] == name
		}
		if !match {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil || id >= 65536 {
			return 0, 0, fmt.Errorf("/%s: bad id for %q", file, name)
		}
		second := uint32(id)
		if len(fields) >= 4 && file == "etc/passwd" {
			if g, err := strconv.ParseUint(fields[3], 10, 32); err == nil && g < 65536 {
				second = uint32(g)
			}
		}
		return uint32(id), second, nil
	}
	return 0, 0, fmt.Errorf("%q is not in the image's /%s", name, file)
}
