package gvisor

import (
	"bytes"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The lines of runsc's log that ExitFromLog reads: the run command's last
// word, with the container's wait status as a number, and the fatal
// error of a run that failed (runsc's cmd/util Errorf).
const (
	runscExitLine  = "] Exiting with status: "
	runscFatalLine = "] FATAL ERROR: "
)

// ExitFromLog reads how a one-command sandbox's command ended from its
// runsc's log (log): the raw wait status runsc logged (runsc's own exit
// code folds a signal into 128+n, as a shell does, which is why it is
// not used), ok; or else the failure runsc logged, "" when none.
func ExitFromLog(log []byte) (status uint32, failure string, ok bool) {
	lines := bytes.Split(log, []byte{'\n'})
	for i := len(lines) - 1; i >= 0; i-- {
		line := string(lines[i])
		if _, v, found := strings.Cut(line, runscExitLine); found {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
				return uint32(n), "", true
			}
		}
		if _, v, found := strings.Cut(line, runscFatalLine); found && failure == "" {
			failure = strings.TrimSpace(v)
		}
	}
	return 0, failure, false
}

// StartErrno says which error of a command's start runsc's failure is:
// the guest kernel could not find or execute the command's program
// (execvp's errors), or 0 for any other failure (runsc's own).
func StartErrno(failure string) unix.Errno {
	if !strings.Contains(failure, "error finding executable") && !strings.Contains(failure, "failed to load") {
		return 0
	}
	for _, e := range []unix.Errno{unix.ENOENT, unix.EACCES, unix.ENOEXEC, unix.ENOTDIR, unix.ELOOP, unix.ENAMETOOLONG, unix.EISDIR} {
		if strings.HasSuffix(failure, e.Error()) {
			return e
		}
	}
	return unix.EACCES
}
