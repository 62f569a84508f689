package pmtext

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRecords: the kernel's records are read for the sandbox's
// group only, and a process's name, the sandbox's to choose, can neither
// forge a pid nor hide its memory.
func TestRecords(t *testing.T) {
	const id = "0123456789ab"
	for _, tt := range []struct {
		msg string
		pid int
		ok  bool
	}{
		{"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/airlock/" + id + ",task_memcg=/airlock/" + id + ",task=t,pid=8725,uid=1073742824", 8725, true},
		{"oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/airlock/" + id + ",task_memcg=/airlock/" + id + ",task=x,pid=1,y,pid=42,uid=5", 42, true},
		{"oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/airlock/other,task_memcg=/airlock/other,task=x/" + id + ",pid=7,uid=5", 0, false},
		{"oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/airlock/x" + id + ",task=t,pid=7,uid=5", 0, false},
		{"Memory cgroup out of memory: Killed process 1 (t)", 0, false},
	} {
		got, pid, ok := OOMKill(tt.msg)
		if ok = ok && got == id; ok != tt.ok || ok && pid != tt.pid {
			t.Errorf("%q: %d %v, want %d %v", tt.msg, pid, ok, tt.pid, tt.ok)
		}
	}
	p, ok := Killed("Memory cgroup out of memory: Killed process 42 (a) total-vm:9kB, anon-rss:1kB) total-vm:1490112kB, anon-rss:28032kB, file-rss:0kB, shmem-rss:1852kB, UID:1073742824 pgtables:148kB oom_score_adj:0", 42)
	if !ok || p.Command != "[a) total-vm:9kB, anon-rss:1kB]" || p.RSSBytes != (28032+1852)<<10 {
		t.Errorf("killed: %+v %v", p, ok)
	}
	if _, ok := Killed("Memory cgroup out of memory: Killed process 421 (a) total-vm:1kB, anon-rss:1kB", 42); ok {
		t.Error("another pid's record taken")
	}
	if _, ok := Killed("audit: comm=\"x\" exe=\"/tmp/Memory cgroup out of memory: Killed process 42 (a) total-vm:1kB, anon-rss:99999kB", 42); ok {
		t.Error("a record of another kind, carrying the words, taken")
	}
	if p, ok := Killed("Out of memory: Killed process 42 (a) total-vm:9kB, anon-rss:3kB, file-rss:0kB, shmem-rss:0kB", 42); !ok || p.RSSBytes != 3<<10 {
		t.Errorf("the host-wide killer's record: %+v %v", p, ok)
	}
	st, ok := ParseStat([]byte("77 (a) b (c) S 12 77 77 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 250 18446744073709551615"))
	if !ok || st.PPID != 12 || st.Comm != "a) b (c" || st.RSS <= 0 {
		t.Errorf("stat: %+v %v", st, ok)
	}
	if got := CommandLine([]byte("sh\x00-c\x00echo \x1b[2J\x00")); got != "sh -c echo ?[2J" {
		t.Errorf("command line %q", got)
	}
}

// TestKills: a kill is named by its second record only, whatever
// other records come between; the latest kill of a group is the one
// found; the kills kept are bounded.
func TestKills(t *testing.T) {
	k := &Kills{}
	summary := func(id string, pid int) string {
		return fmt.Sprintf("oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/airlock/%s,task_memcg=/airlock/%[1]s,task=t,pid=%d,uid=5", id, pid)
	}
	killed := func(pid int, name string) string {
		return fmt.Sprintf("Memory cgroup out of memory: Killed process %d (%s) total-vm:9kB, anon-rss:2kB, file-rss:0kB, shmem-rss:0kB", pid, name)
	}
	for _, msg := range []string{
		summary("aaaaaaaaaaaa", 10),
		summary("bbbbbbbbbbbb", 20),
		killed(11, "other"), // the group kill's others
		killed(20, "b"),
		"Tasks in /airlock/aaaaaaaaaaaa are going to be killed due to memory.oom.group set",
	} {
		k.Record(msg)
	}
	if kill, ok := k.Find("aaaaaaaaaaaa"); !ok || kill.Named || kill.Process.PID != 10 {
		t.Errorf("a: %+v, want pid 10 not named yet", kill)
	}
	if kill, ok := k.Find("bbbbbbbbbbbb"); !ok || !kill.Named || kill.Process.Command != "[b]" || kill.Process.RSSBytes != 2<<10 {
		t.Errorf("b: %+v", kill)
	}
	k.Record(killed(10, "a"))
	k.Record(summary("aaaaaaaaaaaa", 30))
	k.Record(killed(30, "a2"))
	if kill, ok := k.Find("aaaaaaaaaaaa"); !ok || kill.Process.Command != "[a2]" {
		t.Errorf("a, latest: %+v", kill)
	}
	if _, ok := k.Find("cccccccccccc"); ok {
		t.Error("a kill found for a group with none")
	}
	for i := range 2 * MaxKills {
		k.Record(summary(fmt.Sprintf("%012d", i), 100+i))
	}
	_, newest := k.Find(fmt.Sprintf("%012d", 2*MaxKills-1))
	_, oldest := k.Find("bbbbbbbbbbbb")
	if k.Len() != MaxKills || !newest || oldest {
		t.Errorf("%d kills kept", k.Len())
	}
}

// TestPath: a path the sandbox named is shown as printable text, at
// most MaxPath bytes, valid UTF-8, its end (the file's own name) kept.
func TestPath(t *testing.T) {
	long := "/tmp/" + strings.Repeat("a", 300) + "/tail.bin"
	for _, tt := range []struct{ in, want string }{
		{"/tmp/big.bin", "/tmp/big.bin"},
		{"/tmp/a\nb\x1b[2J", "/tmp/a?b?[2J"},
		{"/tmp/\xff\xfe.bin", "/tmp/?.bin"}, // a run of invalid bytes is one "?"
		{"/tmp/\u00e9t\u00e9", "/tmp/\u00e9t\u00e9"},
		{long, long[:126] + "…" + long[len(long)-126:]},
	} {
		if got := Path(tt.in); got != tt.want {
			t.Errorf("Path(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzPath(f *testing.F) {
	f.Add("/tmp/big.bin")
	f.Add("/tmp/" + strings.Repeat("\u00e9", 200))
	f.Fuzz(func(t *testing.T, p string) {
		got := Path(p)
		if len(got) > MaxPath || !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("Path(%q) = %q", p, got)
		}
	})
}

func FuzzRecords(f *testing.F) {
	f.Add("oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/a/b,task=t,pid=1,uid=2", "Memory cgroup out of memory: Killed process 1 (t) total-vm:1kB, anon-rss:1kB")
	f.Fuzz(func(t *testing.T, a, b string) {
		var k Kills
		k.Record(Message([]byte(a)))
		k.Record(b)
		if _, pid, ok := OOMKill(a); ok && pid <= 0 {
			t.Errorf("OOMKill(%q): pid %d", a, pid)
		}
		if p, ok := Killed(b, 1); ok && (p.PID != 1 || p.Command != Printable(p.Command)) {
			t.Errorf("Killed(%q) = %+v", b, p)
		}
		if st, ok := ParseStat([]byte(a)); ok && st.Comm != Printable(st.Comm) {
			t.Errorf("ParseStat(%q) = %+v", a, st)
		}
		if p := Printable(b); !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("Printable(%q) = %q", b, p)
		}
	})
}
