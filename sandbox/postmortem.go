package sandbox

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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
		var err error
		if pm.Killed, err = s.rt.kmsg.killed(s.id, deadline); err != nil {
			notes = append(notes, "the kernel's log, which names the process the out-of-memory killer ended, could not be read")
		} else if c, err := s.group.Counters(); pm.Killed == nil && err == nil && c.OOMKills > 0 {
			// (A breach of the socket buffers' share kills nothing.)
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
	for _, pid := range pids {
		if time.Now().After(deadline) {
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
	if !ok || !inGroup(cg, id) {
		return pmProc{}, false
	}
	st, ok := readAt(dfd, "stat", buf[:])
	if !ok {
		return pmProc{}, false
	}
	p, comm, ok := parseStat(st)
	if !ok {
		return pmProc{}, false
	}
	p.pid = pid
	var cmd [maxCommand]byte
	if c, ok := readAt(dfd, "cmdline", cmd[:]); ok && len(c) > 0 {
		p.command = commandLine(c)
	} else {
		p.command = "[" + comm + "]"
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

// inGroup reports whether a /proc/PID/cgroup names a group whose last
// element is id (every line, each hierarchy, names the same group).
func inGroup(cg []byte, id string) bool {
	for _, line := range bytes.Split(cg, []byte{'\n'}) {
		if i := bytes.LastIndexByte(line, '/'); i >= 0 && string(line[i+1:]) == id {
			return true
		}
	}
	return false
}

// parseStat reads the parent, the resident memory and the name of a
// /proc/PID/stat. The name is in parentheses and may hold anything, a
// parenthesis included: the fields are read after the last one.
func parseStat(st []byte) (p pmProc, comm string, ok bool) {
	open, end := bytes.IndexByte(st, '('), bytes.LastIndexByte(st, ')')
	if open < 0 || end < open {
		return pmProc{}, "", false
	}
	comm = printable(string(st[open+1 : end]))
	f := strings.Fields(string(st[end+1:]))
	// After the name: state(0) ppid(1) ... rss(21), in pages.
	if len(f) < 22 {
		return pmProc{}, "", false
	}
	ppid, err1 := strconv.Atoi(f[1])
	rss, err2 := strconv.ParseInt(f[21], 10, 64)
	if err1 != nil || err2 != nil {
		return pmProc{}, "", false
	}
	return pmProc{ppid: ppid, rss: rss * int64(unix.Getpagesize())}, comm, true
}

// commandLine joins a /proc/PID/cmdline's arguments with spaces.
func commandLine(c []byte) string {
	c = bytes.TrimRight(c, "\x00")
	return printable(string(bytes.ReplaceAll(c, []byte{0}, []byte{' '})))
}

// printable replaces what is not printable text, so that a command line
// reads as data wherever it is shown.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '\uFFFD' {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// kmsgMessage is the text of a /dev/kmsg record ("prio,seq,time,flags;
// text" and continuation lines).
func kmsgMessage(rec []byte) string {
	if i := bytes.IndexByte(rec, ';'); i >= 0 {
		rec = rec[i+1:]
	}
	if i := bytes.IndexByte(rec, '\n'); i >= 0 {
		rec = rec[:i]
	}
	return string(rec)
}

// oomKillRecord reads an "oom-kill:" record: the last element of the
// killed process's memory cgroup (task_memcg=, which the kernel writes
// and a sandbox cannot) and its pid. The pid is the last "pid=" field:
// the task's name, before it, is the sandbox's to choose.
func oomKillRecord(msg string) (id string, pid int, ok bool) {
	if !strings.HasPrefix(msg, "oom-kill:") {
		return "", 0, false
	}
	_, memcg, ok := strings.Cut(msg, ",task_memcg=")
	if !ok {
		return "", 0, false
	}
	memcg, _, ok = strings.Cut(memcg, ",task=")
	i := strings.LastIndexByte(memcg, '/')
	if !ok || i < 0 || i == len(memcg)-1 {
		return "", 0, false
	}
	j := strings.LastIndex(msg, ",pid=")
	if j < 0 {
		return "", 0, false
	}
	ps, _, _ := strings.Cut(msg[j+len(",pid="):], ",")
	pid, err := strconv.Atoi(ps)
	return memcg[i+1:], pid, err == nil && pid > 0
}

// oomKillers are the kernel's names of its out-of-memory killer, which
// begin its "Killed process" records (mm/oom_kill.c).
var oomKillers = []string{"Memory cgroup out of memory", "Out of memory", "Out of memory (oom_kill_allocating_task)"}

// killedRecord reads the "Memory cgroup out of memory: Killed process
// PID (name) total-vm:..kB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB,
// ..." record of pid (or the host-wide killer's, "Out of memory: ...").
// The record must begin with one of the kernel's own prefixes: other
// records carry text a sandbox chose (a process's name, a path) before
// the words.
func killedRecord(msg string, pid int) (*result.Process, bool) {
	var rest string
	ok := false
	for _, by := range oomKillers {
		if rest, ok = strings.CutPrefix(msg, by+": Killed process "+strconv.Itoa(pid)+" ("); ok {
			break
		}
	}
	if !ok {
		return nil, false
	}
	i := strings.LastIndex(rest, ") total-vm:")
	if i < 0 {
		return nil, false
	}
	p := &result.Process{PID: pid, Command: "[" + printable(rest[:i]) + "]"}
	for _, f := range strings.Split(rest[i:], ", ") {
		k, v, ok := strings.Cut(f, ":")
		if !ok || !(k == "anon-rss" || k == "file-rss" || k == "shmem-rss") {
			continue
		}
		if kb, err := strconv.ParseInt(strings.TrimSuffix(v, "kB"), 10, 64); err == nil {
			p.RSSBytes += kb << 10
		}
	}
	return p, true
}
