// Package rootowned checks that a program airlock runs with privilege, or
// places inside every sandbox, is one only root can change.
package rootowned

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Check makes sure path is a regular, executable file that only root can
// change, in directories only root can change (as sshd's StrictModes
// checks): a binary that someone else could replace would be theirs to
// run with airlock's privileges. role names it in the error ("every
// sandbox's init"). When this process is not root, ownership is not
// checked (a test, say), only the modes.
func Check(path, role string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s is not fit to be %s: %s", path, role, why)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s: %w", role, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("%s: %w", role, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return bad("not an executable file")
	}
	for p := abs; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", role, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return bad("cannot read the owner of " + p)
		}
		if os.Geteuid() == 0 && sys.Uid != 0 {
			return bad(p + " is not owned by root")
		}
		// A sticky directory (/tmp) lets others add entries but not
		// rename over root's.
		if st.Mode().Perm()&0o022 != 0 && !(st.IsDir() && st.Mode()&os.ModeSticky != 0) {
			return bad(p + " is writable by group or others")
		}
		if p == "/" {
			return nil
		}
	}
}
