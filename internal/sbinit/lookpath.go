package sbinit

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// lookPath resolves a command name the way execvp does, using PATH from the
// command's own environment (never init's).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		// With the effective uid: init's real one is not the command's.
		if err := unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS); err != nil {
			denied = unix.EACCES
			continue
		}
		return p, nil
	}
	if denied != nil {
		return "", denied
	}
	return "", unix.ENOENT
}
