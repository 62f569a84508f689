// Package dirwatch reports changes below a directory that untrusted code
// controls — a sandbox's workspace, watched from the host — with inotify.
//
// Every directory is opened with inroot (below the watched one, no
// symlinks, no other mounts) and watched through its descriptor, never
// through a path the sandbox could swap for a symlink; the opens and the
// watches are made as the sandbox's user (inroot.AsUser), so the host's
// root powers reach nothing that user could not read. A watch costs one
// inotify instance and one descriptor while it lives; Options.MaxDirs
// bounds the kernel watches a recursive one adds.
package dirwatch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
)

// Op is what happened to a name.
type Op uint8

// The operations, as E2B's envd (after fsnotify) names them.
const (
	Create Op = iota + 1 // created, or moved in
	Write                // written to
	Remove               // removed
	Rename               // moved away (its new name, if still below, comes as Create)
	Chmod                // attributes changed
)

var opNames = [...]string{Create: "create", Write: "write", Remove: "remove", Rename: "rename", Chmod: "chmod"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Event is one change: Name is relative to the watched directory
// ("a.txt", "sub/b.txt").
type Event struct {
	Name string
	Op   Op
	Dir  bool // Name is (or was) a directory
}

// Errors that end a watch.
var (
	// ErrGone: the watched directory was removed, or its file system
	// unmounted (the sandbox destroyed).
	ErrGone = errdefs.New(errdefs.ErrNotFound, "the watched directory is gone")
	// ErrOverflow: changes came faster than they were read and the
	// kernel dropped some; the caller cannot know what it missed.
	ErrOverflow = errdefs.New(errdefs.ErrLimit, "changes came faster than they were read, and some were lost")
	// ErrTooMany: a recursive watch reached Options.MaxDirs directories.
	ErrTooMany = errdefs.New(errdefs.ErrLimit, "too many directories to watch")
)

// Options shape a watch.
type Options struct {
	// Recursive watches every directory below too, as they come.
	Recursive bool
	// MaxDirs bounds the directories watched (DefaultMaxDirs when 0).
	MaxDirs int
	// UID and GID are the user the directories are opened and watched
	// as.
	UID, GID int
}

// DefaultMaxDirs bounds a recursive watch when Options leave it 0.
const DefaultMaxDirs = 1024

const mask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF |
	unix.IN_EXCL_UNLINK | unix.IN_ONLYDIR

// Watcher watches one directory (and, if recursive, those below it).
// Next and Close may be called from different goroutines; Next from one
// at a time.
type Watcher struct {
	opt Options
	in  *os.File        // the inotify instance, non-blocking (in Go's poller)
	rc  syscall.RawConn // in's descriptor, for the calls besides Read
	buf []byte

	// mu guards top, root and dirs: Next's records add and drop
	// watches while Close may run.
	mu     sync.Mutex
	top    *os.File         // the caller's directory, duplicated (nil once closed)
	prefix string           // the watched directory's path below top
	root   int32            // the watched directory's watch descriptor
	dirs   map[int32]string // watch descriptor → path below the watched directory ("" for itself)
	queue  []Event          // Next's alone
}

// Watch starts watching rel below dir ("" for dir itself).
func Watch(dir *os.File, rel string, opt Options) (*Watcher, error) {
	if opt.MaxDirs <= 0 {
		opt.MaxDirs = DefaultMaxDirs
	}
	w := &Watcher{opt: opt, prefix: rel, dirs: map[int32]string{}, buf: make([]byte, 64<<10)}
	// Not the watched directory itself: a descriptor held on it would
	// hold back the kernel's report of its removal until Close.
	top, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	w.top = os.NewFile(uintptr(top), dir.Name())
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		w.top.Close()
		if errors.Is(err, unix.EMFILE) {
			return nil, fmt.Errorf("%w: the host's inotify instances are used up (fs.inotify.max_user_instances)", errdefs.ErrLimit)
		}
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w.in = os.NewFile(uintptr(fd), "inotify")
	if w.rc, err = w.in.SyscallConn(); err != nil {
		w.Close()
		return nil, err
	}
	w.root = -1
	if err := w.add(""); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// add watches the directory rel below the watched one and, for a recursive watch,
// every directory below it. It is called with mu held (or before the
// Watcher is shared).
func (w *Watcher) add(rel string) error {
	return inroot.AsUser(w.opt.UID, w.opt.GID, func() error {
		todo := []string{rel}
		for len(todo) > 0 {
			rel := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			subs, err := w.watchOne(rel)
			if errors.Is(err, inroot.ErrNotFound) || errors.Is(err, inroot.ErrPath) {
				if rel == "" {
					return err
				}
				continue // gone meanwhile, or a symlink now: not followed
			}
			if err != nil {
				return err
			}
			todo = append(todo, subs...)
		}
		return nil
	})
}

// watchOne adds the kernel watch for rel and returns the directories
// right below it when the watch is recursive. It runs as the user.
func (w *Watcher) watchOne(rel string) ([]string, error) {
	if len(w.dirs) >= w.opt.MaxDirs {
		return nil, fmt.Errorf("%w: %d at most", ErrTooMany, w.opt.MaxDirs)
	}
	if w.top == nil {
		return nil, os.ErrClosed
	}
	d, err := inroot.OpenDir(w.top, join(w.prefix, rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	// The descriptor's /proc link names exactly the directory opened,
	// whatever its path has become since.
	var wd int
	cerr := w.rc.Control(func(fd uintptr) {
		wd, err = unix.InotifyAddWatch(int(fd), "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), mask)
	})
	switch {
	case cerr != nil:
		return nil, cerr
	case errors.Is(err, unix.ENOSPC):
		return nil, fmt.Errorf("%w: the host's inotify watches are used up (fs.inotify.max_user_watches)", errdefs.ErrLimit)
	case err != nil:
		return nil, fmt.Errorf("watch %q: %w", rel, err)
	}
	if rel == "" {
		w.root = int32(wd)
	}
	w.dirs[int32(wd)] = rel
	if !w.opt.Recursive {
		return nil, nil
	}
	es, err := inroot.ReadDir(d, "", 1)
	if err != nil {
		return nil, err
	}
	var subs []string
	for _, e := range es {
		if e.IsDir() {
			subs = append(subs, join(rel, e.Name))
		}
	}
	return subs, nil
}

// unwatch drops the watches of rel and everything below it (moved away:
// their paths are no longer known).
func (w *Watcher) unwatch(rel string) {
	for wd, p := range w.dirs {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			delete(w.dirs, wd)
			_ = w.rc.Control(func(fd uintptr) { unix.InotifyRmWatch(int(fd), uint32(wd)) })
		}
	}
}

func join(dir, name string) string {
	switch {
	case dir == "":
		return name
	case name == "":
		return dir
	}
	return dir + "/" + name
}

// Next returns the next change, waiting for one. It returns ErrGone,
// ErrOverflow or ErrTooMany when the watch can go on no longer, and
// os.ErrClosed once Close was called.
func (w *Watcher) Next() (Event, error) {
	for len(w.queue) == 0 {
		n, err := w.in.Read(w.buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = os.ErrClosed
			}
			return Event{}, err
		}
		w.mu.Lock()
		err = w.parse(w.buf[:n])
		w.mu.Unlock()
		if err != nil {
			return Event{}, err
		}
	}
	ev := w.queue[0]
	w.queue = w.queue[1:]
	return ev, nil
}

// parse turns a read's inotify records into events, following the
// directories a recursive watch must add or drop.
func (w *Watcher) parse(b []byte) error {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := inotifyEvent(b)
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			return fmt.Errorf("inotify: a record of %d bytes in a read of %d", end, len(b))
		}
		name := string(b[unix.SizeofInotifyEvent:end])
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		m, wd := raw.Mask, raw.Wd
		b = b[end:]
		if m&unix.IN_Q_OVERFLOW != 0 {
			return ErrOverflow
		}
		if m&(unix.IN_DELETE_SELF|unix.IN_UNMOUNT) != 0 && wd == w.root {
			return ErrGone
		}
		if m&unix.IN_IGNORED != 0 {
			delete(w.dirs, wd)
			if wd == w.root {
				return ErrGone
			}
			continue
		}
		dir, ok := w.dirs[wd]
		if !ok || name == "" {
			continue // a dropped watch's last records, or the directory's own
		}
		rel, isDir := join(dir, name), m&unix.IN_ISDIR != 0
		var op Op
		switch {
		case m&unix.IN_CREATE != 0, m&unix.IN_MOVED_TO != 0:
			op = Create
			if isDir && w.opt.Recursive {
				if err := w.add(rel); err != nil {
					return err
				}
			}
		case m&unix.IN_MOVED_FROM != 0:
			op = Rename
			if isDir {
				w.unwatch(rel)
			}
		case m&unix.IN_DELETE != 0:
			op = Remove
		case m&unix.IN_MODIFY != 0:
			op = Write
		case m&unix.IN_ATTRIB != 0:
			op = Chmod
		default:
			continue
		}
		w.queue = append(w.queue, Event{Name: rel, Op: op, Dir: isDir})
	}
	return nil
}

// Close ends the watch; a Next waiting returns os.ErrClosed.
func (w *Watcher) Close() error {
	var err error
	if w.in != nil {
		err = w.in.Close()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.top != nil {
		w.top.Close()
		w.top = nil
	}
	return err
}
