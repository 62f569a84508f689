package inroot

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// maxXattrList bounds the names of a file's extended attributes read at
// once, and maxXattrValue one value (the VFS's own bounds: XATTR_LIST_MAX,
// XATTR_SIZE_MAX): whatever a sandbox sets on its files, describing one
// costs the host no more.
const (
	maxXattrList  = 64 << 10
	maxXattrValue = 64 << 10
)

// Xattrs returns the extended attributes of rel below dir ("" for dir
// itself) whose names begin with prefix, prefix cut, leaving out any that
// is not valid UTF-8; nil when there are none or the file system keeps
// none. Only a regular file's or a directory's are read, never through a
// symlink. Their names and values may come to max bytes in all, else
// ErrTooLarge (a sandbox may set many, and large ones, on its files).
func Xattrs(dir *os.File, rel, prefix string, max int) (map[string]string, error) {
	name := "."
	if rel != "" {
		parts, err := Split(rel)
		if err != nil {
			return nil, err
		}
		name = strings.Join(parts, "/")
	}
	fd, err := openAt(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, mapErr(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, mapErr(err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return nil, nil
	}
	// The *xattr calls take no O_PATH descriptor; its /proc/self/fd link
	// is the file itself (a magic link: no path is walked again), and
	// opening the file to read would block on a FIFO swapped in.
	return readXattrs(fmt.Sprintf("/proc/self/fd/%d", fd), prefix, max, unix.Listxattr, unix.Getxattr)
}

func readXattrs[T any](f T, prefix string, max int, list func(T, []byte) (int, error), get func(T, string, []byte) (int, error)) (map[string]string, error) {
	buf := make([]byte, maxXattrList)
	n, err := list(f, buf)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ERANGE) {
			return nil, nil
		}
		return nil, mapErr(err)
	}
	var out map[string]string
	val := make([]byte, min(maxXattrValue, max+1))
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, prefix)
		if !ok || key == "" || !utf8.ValidString(key) {
			continue
		}
		if max -= len(name); max < 0 {
			return nil, ErrTooLarge
		}
		m, err := get(f, name, val)
		if errors.Is(err, unix.ERANGE) {
			return nil, ErrTooLarge
		}
		if err != nil || !utf8.Valid(val[:m]) {
			continue // gone meanwhile, or not text
		}
		if max -= m; max < 0 {
			return nil, ErrTooLarge
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:m])
	}
	return out, nil
}

// SetXattrs makes kv the attributes of the open file f under prefix
// (names prefix+key), removing the others under it, and returns them as
// read back. A file system that keeps none returns nil, nil.
func SetXattrs(f *os.File, prefix string, kv map[string]string) (map[string]string, error) {
	fd := int(f.Fd())
	buf := make([]byte, maxXattrList)
	n, err := unix.Flistxattr(fd, buf)
	switch {
	case errors.Is(err, unix.ENOTSUP):
		return nil, nil
	case err != nil:
		return nil, mapErr(err)
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, prefix)
		if _, keep := kv[key]; !ok || keep {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return nil, mapErr(err)
		}
	}
	for k, v := range kv {
		if err := unix.Fsetxattr(fd, prefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return nil, nil
			}
			return nil, mapErr(err)
		}
	}
	// As envd, a read-back that fails (code inside adding attributes
	// meanwhile) leaves the answer without them, the write done.
	kept, _ := readXattrs(fd, prefix, maxXattrValue, unix.Flistxattr, unix.Fgetxattr)
	return kept, nil
}
