package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// CheckStateDir reports whether the sandboxes' users can reach dir, the
// state directory: each sandbox's init runs as an unprivileged host uid
// of its own range (never the owner or group of a host directory) and
// mounts its new root on a directory below dir, so every directory on
// the way needs search permission for others (o+x). A directory such as
// `mktemp -d` makes (0700) would fail every sandbox with a bare
// "permission denied" at that mount; this names the directory and the fix
// instead. Directories not there yet are skipped (New makes them 0711).
func CheckStateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	// The directories a path lookup goes through are the symlinks'
	// targets, not the names written.
	real, err := filepath.EvalSymlinks(abs)
	for err != nil && os.IsNotExist(err) && abs != "/" {
		abs = filepath.Dir(abs)
		real, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: state directory %s: %s has mode %#o, which the sandboxes' users (unprivileged host uids) cannot pass through to mount their root below it: run chmod o+x %s, or choose a state directory whose parents all allow it (the default is /run/airlock)",
				ErrInvalid, dir, p, fi.Mode().Perm(), p)
		}
		if p == "/" {
			return nil
		}
	}
}
