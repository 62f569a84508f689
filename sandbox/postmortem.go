package sandbox

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/pmtext"
	"github.com/airlockhq/airlock/result"
)

// A breach's post-mortem (issue 40): before a breached sandbox is
// destroyed, what explains the breach is read from the host: the
// process the kernel's out-of-memory killer ended (from the kernel's
// log), the largest processes by resident memory, the parents with the
// most children. Only the kernel's files are read, each with a bounded
// read, under a small time budget and a bound on processes: a hostile
// sandbox with thousands of processes or long command lines makes it
// neither slow nor large. Nothing from inside is run or trusted: a
// command line is data, and every process is checked to be in the
// sandbox's group through a descriptor of its own /proc directory, so a
// pid reused by a host process is never read. A disk breach's files are
// read as postmortem_disk.go says.

const (
	// postMortemBudget bounds the reading; the sandbox is destroyed
	// after it, so it also bounds how much later than the breach that
	// happens.
	postMortemBudget = 100 * time.Millisecond
	// postMortemProcs bounds the processes read.
	postMortemProcs = 512
	// postMortemFirst processes are read even past the budget.
	postMortemFirst = 4
	// maxCommand bounds a command line read.
	maxCommand = 256
	// kmsgRecords and kmsgBytes bound the kernel log read.
	kmsgRecords = 8192
	kmsgBytes   = 4 << 20
)

// pmProc is what the post-mortem read of one process.
type pmProc struct {
	pid, ppid int
	rss       int64
	command   string
}

// postMortem reads what explains breach l of sandbox s, within the
// budget.
func (s *Sandbox) postMortem(l *result.Limit) *result.PostMortem {
	deadline := time.Now().Add(postMortemBudget)
	pm := &result.PostMortem{}
	var notes []string
	if l.Name == result.LimitMemory {
		killed, whole, err := s.rt.kmsg.killed(s.id, deadline)
		pm.Killed = killed
		switch c, cerr := s.group.Counters(); {
		case err != nil:
			notes = append(notes, "the kernel's log, which names the process the out-of-memory killer ended, could not be read")
		case killed != nil || cerr != nil || c.OOMKills == 0:
			// Named, or nothing was killed (a breach of the socket
			// buffers' share kills nothing).
		case !whole:
			notes = append(notes, "the kernel's log was not read to its end within the reading's time budget")
		default:
			notes = append(notes, "the kernel's log has no record of the kill (it writes at most ten in five seconds)")
		}
	}
	if l.Name == result.LimitDisk {
		var note string
		// A quarter of the budget is left for the processes.
		pm.Files, pm.Directories, note = s.diskPostMortem(l, deadline.Add(-postMortemBudget/4))
		if note != "" {
			notes = append(notes, note)
		}
		if len(pm.Files) == 0 && len(pm.Directories) == 0 {
			notes = append(notes, "no file was found in the writable directories")
		}
		// What was running, too, within what is left of the budget.
	}
	if s.gv != nil {
		// The host sees runsc, its sentry and gofer; the commands'
		// processes are the guest kernel's.
		notes = append(notes, "under gVisor the commands' processes are not the host's, and are not listed")
		pm.Note = strings.Join(notes, "; ")
		return pm
	}
	pids, err := s.group.Procs()
	if err != nil {
		notes = append(notes, "the sandbox's processes could not be listed")
		pm.Note = strings.Join(notes, "; ")
		return pm
	}
	if len(pids) > postMortemProcs {
		notes = append(notes, "only the first "+strconv.Itoa(postMortemProcs)+" of "+strconv.Itoa(len(pids))+" processes were read")
		pids = pids[:postMortemProcs]
	}
	var procs []pmProc
	for i, pid := range pids {
		// The first few are read whatever the clock says: a host so slow
		// that the budget is gone before them still names a culprit.
		if i >= postMortemFirst && time.Now().After(deadline) {
			notes = append(notes, "the reading's time budget ran out")
			break
		}
		if p, ok := readProc(pid, s.id); ok {
			if pid == s.pid && l.Name != result.LimitPids {
				// airlock's own init: never the culprit (but the
				// parent of orphans, for a pids breach).
				continue
			}
			procs = append(procs, p)
		}
	}
	if l.Name == result.LimitPids {
		pm.Processes = parents(procs)
	} else {
		pm.Processes = largest(procs)
	}
	if len(procs) == 0 && pm.Killed == nil && l.Name != result.LimitDisk {
		notes = append(notes, "no process was left to read")
	}
	pm.Note = strings.Join(notes, "; ")
	return pm
}

// largest are the processes with the most resident memory.
func largest(procs []pmProc) []result.Process {
	slices.SortStableFunc(procs, func(a, b pmProc) int { return cmp.Compare(b.rss, a.rss) })
	var out []result.Process
	for _, p := range procs[:min(len(procs), result.MaxPostMortemProcesses)] {
		out = append(out, result.Process{PID: p.pid, Command: p.command, RSSBytes: p.rss})
	}
	return out
}

// parents are the processes with the most children among procs.
func parents(procs []pmProc) []result.Process {
	kids := map[int]int{}
	for _, p := range procs {
		kids[p.ppid]++
	}
	var out []result.Process
	for _, p := range procs {
		if kids[p.pid] > 0 {
			out = append(out, result.Process{PID: p.pid, Command: p.command, RSSBytes: p.rss, Children: kids[p.pid]})
		}
	}
	slices.SortStableFunc(out, func(a, b result.Process) int { return b.Children - a.Children })
	return out[:min(len(out), result.MaxPostMortemProcesses)]
}

// readProc reads process pid, if it is still the sandbox's: its
// directory in /proc is opened first and everything read through that
// descriptor, which fails once the process has ended (a reused pid
// cannot answer), and its cgroup must name the sandbox's group.
func readProc(pid int, id string) (pmProc, bool) {
	dfd, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return pmProc{}, false
	}
	defer unix.Close(dfd)
	var buf [4096]byte
	cg, ok := readAt(dfd, "cgroup", buf[:])
	if !ok || !pmtext.InGroup(cg, id) {
		return pmProc{}, false
	}
	st, ok := readAt(dfd, "stat", buf[:])
	if !ok {
		return pmProc{}, false
	}
	stat, ok := pmtext.ParseStat(st)
	if !ok {
		return pmProc{}, false
	}
	p := pmProc{pid: pid, ppid: stat.PPID, rss: stat.RSS}
	var cmd [maxCommand]byte
	if c, ok := readAt(dfd, "cmdline", cmd[:]); ok && len(c) > 0 {
		p.command = pmtext.CommandLine(c)
	} else {
		p.command = "[" + stat.Comm + "]"
	}
	return p, true
}

// readAt reads what fits of file name in directory dfd.
func readAt(dfd int, name string, buf []byte) ([]byte, bool) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil || n < 0 {
		return nil, false
	}
	return buf[:n], true
}
