// Package pmtext reads, as data, the text a breach's post-mortem takes
// from the kernel: its log's records of out-of-memory kills and a
// process's /proc files, whose names, command lines and paths a sandbox
// chooses. Nothing here trusts that text: it is bounded, made printable,
// and read only where the kernel's own fields put it.
package pmtext

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/result"
)

// MaxPath bounds a path a post-mortem reports.
const MaxPath = 256

var pageSize = os.Getpagesize()

// InGroup reports whether a /proc/PID/cgroup names a group whose last
// element is id (every line, each hierarchy, names the same group).
func InGroup(cg []byte, id string) bool {
	for _, line := range bytes.Split(cg, []byte{'\n'}) {
		if i := bytes.LastIndexByte(line, '/'); i >= 0 && string(line[i+1:]) == id {
			return true
		}
	}
	return false
}

// Stat is what a post-mortem reads of a /proc/PID/stat.
type Stat struct {
	PPID int
	RSS  int64  // bytes
	Comm string // printable
}

// ParseStat reads the parent, the resident memory and the name of a
// /proc/PID/stat. The name is in parentheses and may hold anything, a
// parenthesis included: the fields are read after the last one.
func ParseStat(st []byte) (Stat, bool) {
	open, end := bytes.IndexByte(st, '('), bytes.LastIndexByte(st, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	comm := Printable(string(st[open+1 : end]))
	f := strings.Fields(string(st[end+1:]))
	// After the name: state(0) ppid(1) ... rss(21), in pages.
	if len(f) < 22 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	rss, err2 := strconv.ParseInt(f[21], 10, 64)
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return Stat{PPID: ppid, RSS: rss * int64(pageSize), Comm: comm}, true
}

// CommandLine joins a /proc/PID/cmdline's arguments with spaces.
func CommandLine(c []byte) string {
	c = bytes.TrimRight(c, "\x00")
	return Printable(string(bytes.ReplaceAll(c, []byte{0}, []byte{' '})))
}

// Printable replaces what is not printable text, so that a command line
// reads as data wherever it is shown.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '\uFFFD' {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// Message is the text of a /dev/kmsg record ("prio,seq,time,flags;
// text" and continuation lines).
func Message(rec []byte) string {
	if i := bytes.IndexByte(rec, ';'); i >= 0 {
		rec = rec[i+1:]
	}
	if i := bytes.IndexByte(rec, '\n'); i >= 0 {
		rec = rec[:i]
	}
	return string(rec)
}

// OOMKill reads an "oom-kill:" record: the last element of the
// killed process's memory cgroup (task_memcg=, which the kernel writes
// and a sandbox cannot) and its pid. The pid is the last "pid=" field:
// the task's name, before it, is the sandbox's to choose.
func OOMKill(msg string) (id string, pid int, ok bool) {
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

// Killed reads the "Memory cgroup out of memory: Killed process
// PID (name) total-vm:..kB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB,
// ..." record of pid (or the host-wide killer's, "Out of memory: ...").
// The record must begin with one of the kernel's own prefixes: other
// records carry text a sandbox chose (a process's name, a path) before
// the words.
func Killed(msg string, pid int) (*result.Process, bool) {
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
	p := &result.Process{PID: pid, Command: "[" + Printable(rest[:i]) + "]"}
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

// Path makes a path the sandbox named safe to show: what is not
// printable text becomes "?", and a long one keeps its start and its
// end (the file's own name) around "…", at most MaxPath bytes.
func Path(p string) string {
	p = Printable(p)
	if len(p) <= MaxPath {
		return p
	}
	const keep = (MaxPath - len("…")) / 2
	head, tail := p[:keep], p[len(p)-keep:]
	// Cut on rune boundaries.
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return head + "…" + tail
}
