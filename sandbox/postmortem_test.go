package sandbox

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/result"
)

// TestPostMortem: a breach's result names the culprit the test planted,
// read from the host before the sandbox was destroyed: the process the
// out-of-memory killer ended, the parent that forked up to the pids
// ceiling, what was running when the time ran out.
func TestPostMortem(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits *Limits
		argv   []string
		check  func(*result.PostMortem) bool
	}{
		{"memory", limits(func(l *Limits) { l.Memory = 64 << 20 }),
			[]string{"/bin/sh", "-c", `python3 -c 'b = bytearray(400 << 20); import time; time.sleep(15)'; sleep 15`},
			func(pm *result.PostMortem) bool {
				return pm.Killed != nil && pm.Killed.Command == "[python3]" && pm.Killed.RSSBytes > 16<<20
			}},
		{"pids", limits(func(l *Limits) { l.Pids = 16 }),
			// A parent that outlives its failed forks (a shell exits on
			// one, and its children go to init).
			[]string{"python3", "-c", "import os, time\nfor i in range(64):\n    try:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n    except OSError:\n        pass\ntime.sleep(30)"},
			func(pm *result.PostMortem) bool {
				// A reading its budget cut short (the emulated guest's,
				// at a twentieth of this host's speed) counts fewer
				// children, and says so.
				want := 8
				if cut(pm) {
					want = 1
				}
				return len(pm.Processes) > 0 && strings.HasPrefix(pm.Processes[0].Command, "python3 -c import os, time?for i in range(64)") && pm.Processes[0].Children >= want
			}},
		{"disk", limits(func(l *Limits) { l.Disk = 16 << 20 }),
			// Decoys elsewhere in the writable directories, a sparse
			// file whose length is a gigabyte, and the culprit.
			[]string{"/bin/sh", "-c", `mkdir -p /tmp/cache /workspace/src && head -c 2000000 /dev/zero > /workspace/src/decoy.bin && head -c 500000 /dev/zero > /dev/shm/decoy && python3 -c 'f = open("/tmp/sparse.bin", "wb"); f.seek(1 << 30); f.write(b"x")' && head -c 100000000 /dev/zero > /tmp/cache/big.bin; sleep 15`},
			func(pm *result.PostMortem) bool {
				f, d := pm.Files, pm.Directories
				culprit := len(f) > 0 && f[0].Path == "/tmp/cache/big.bin" && f[0].Bytes > 8<<20 &&
					len(d) > 0 && d[0].Path == "/tmp/cache" && d[0].Entries == 1
				if cut(pm) {
					// /tmp is read first: a reading its budget cut short
					// still names the culprit, and says so.
					return culprit
				}
				return culprit && len(f) >= 3 && f[1].Path == "/workspace/src/decoy.bin" && f[2].Path == "/dev/shm/decoy"
			}},
		{"disk, a hostile tree", limits(func(l *Limits) { l.Disk = 16 << 20 }),
			// Deeper than the walk goes, links to / and in loops, names
			// of control bytes and invalid UTF-8, and the culprit under
			// a name that is a newline and 240 bytes long.
			[]string{"python3", "-c", `import os, time
os.makedirs("/tmp/deep" + "/d" * 40)
os.symlink("/", "/tmp/deep/root")
os.symlink(".", "/tmp/deep/self")
os.symlink("/tmp/deep", "/tmp/deep/d/loop")
os.mkdir(b"/tmp/\xff\x1b[2J")
open(b"/tmp/\xff\x1b[2J/decoy", "wb").write(b"x" * 100000)
f = open("/tmp/deep" + "/d" * 10 + "/big\n" + "y" * 240 + ".bin", "wb")
try:
    while True:
        f.write(bytes(1 << 20))
        f.flush()
except OSError:
    pass
time.sleep(15)`},
			func(pm *result.PostMortem) bool {
				f := pm.Files
				if len(f) < 1 || !strings.HasPrefix(f[0].Path, "/tmp/deep"+strings.Repeat("/d", 10)+"/big?yyy") ||
					!strings.HasSuffix(f[0].Path, "yyy.bin") || len(f[0].Path) > 256 || (!cut(pm) && (len(f) < 2 || f[1].Path != "/tmp/??[2J/decoy")) {
					return false
				}
				for _, e := range append(f, pm.Directories...) {
					if e.Path != "/tmp" && !strings.HasPrefix(e.Path, "/tmp/") {
						return false // a link followed
					}
				}
				// A reading its budget cut short may not have gone deep.
				return strings.Contains(pm.Note, "deeper than 24 levels") || cut(pm)
			}},
		{"disk, inodes", limits(func(l *Limits) { l.Disk = 64 << 20; l.Inodes = 25000 }),
			// More files than the walk reads: it stops, and says so.
			[]string{"python3", "-c", "import os, time\nos.mkdir('/tmp/many')\ntry:\n    for i in range(30000):\n        open('/tmp/many/f%d' % i, 'w').close()\nexcept OSError:\n    pass\ntime.sleep(15)"},
			func(pm *result.PostMortem) bool {
				d := pm.Directories
				// The budget may end the walk first on a slow host (958
				// entries read in the cgroup-v2 guest once).
				return len(d) > 0 && d[0].Path == "/tmp/many" && d[0].Entries >= 100 &&
					(strings.Contains(pm.Note, "only the first 20000 entries were read") || strings.Contains(pm.Note, "time budget"))
			}},
		{"time", limits(func(l *Limits) { l.Time = 300 * time.Millisecond }),
			[]string{"/bin/sh", "-c", `sleep 31 & sleep 32`},
			func(pm *result.PostMortem) bool {
				seen := map[string]bool{}
				for _, p := range pm.Processes {
					seen[p.Command] = p.RSSBytes > 0
				}
				if cut(pm) {
					return seen["sleep 31"] || seen["sleep 32"]
				}
				return seen["sleep 31"] && seen["sleep 32"]
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, runOpts{limits: tt.limits}, tt.argv...)
			t.Logf("post-mortem: %s", r.PostMortem.Summary())
			if r.Outcome != result.LimitExceeded || r.PostMortem == nil || !tt.check(r.PostMortem) {
				t.Fatalf("outcome %s limit %+v, post-mortem %+v", r.Outcome, r.Limit, r.PostMortem)
			}
		})
	}
}

// cut reports whether a post-mortem says its time budget ran out.
func cut(pm *result.PostMortem) bool {
	return strings.Contains(pm.Note, "the reading's time budget ran out")
}

// TestPostMortemRecords: the kernel's records are read for the sandbox's
// group only, and a process's name, the sandbox's to choose, can neither
// forge a pid nor hide its memory.
func TestPostMortemRecords(t *testing.T) {
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
		got, pid, ok := oomKillRecord(tt.msg)
		if ok = ok && got == id; ok != tt.ok || ok && pid != tt.pid {
			t.Errorf("%q: %d %v, want %d %v", tt.msg, pid, ok, tt.pid, tt.ok)
		}
	}
	p, ok := killedRecord("Memory cgroup out of memory: Killed process 42 (a) total-vm:9kB, anon-rss:1kB) total-vm:1490112kB, anon-rss:28032kB, file-rss:0kB, shmem-rss:1852kB, UID:1073742824 pgtables:148kB oom_score_adj:0", 42)
	if !ok || p.Command != "[a) total-vm:9kB, anon-rss:1kB]" || p.RSSBytes != (28032+1852)<<10 {
		t.Errorf("killed: %+v %v", p, ok)
	}
	if _, ok := killedRecord("Memory cgroup out of memory: Killed process 421 (a) total-vm:1kB, anon-rss:1kB", 42); ok {
		t.Error("another pid's record taken")
	}
	if _, ok := killedRecord("audit: comm=\"x\" exe=\"/tmp/Memory cgroup out of memory: Killed process 42 (a) total-vm:1kB, anon-rss:99999kB", 42); ok {
		t.Error("a record of another kind, carrying the words, taken")
	}
	if p, ok := killedRecord("Out of memory: Killed process 42 (a) total-vm:9kB, anon-rss:3kB, file-rss:0kB, shmem-rss:0kB", 42); !ok || p.RSSBytes != 3<<10 {
		t.Errorf("the host-wide killer's record: %+v %v", p, ok)
	}
	st, comm, ok := parseStat([]byte("77 (a) b (c) S 12 77 77 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 250 18446744073709551615"))
	if !ok || st.ppid != 12 || comm != "a) b (c" || st.rss <= 0 {
		t.Errorf("stat: %+v %q %v", st, comm, ok)
	}
	if got := commandLine([]byte("sh\x00-c\x00echo \x1b[2J\x00")); got != "sh -c echo ?[2J" {
		t.Errorf("command line %q", got)
	}
}

// TestKmsgKills: a kill is named by its second record only, whatever
// other records come between; the latest kill of a group is the one
// found; the kills kept are bounded.
func TestKmsgKills(t *testing.T) {
	k := &kmsgLog{}
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
		k.record(msg)
	}
	if kill := k.find("aaaaaaaaaaaa"); kill == nil || kill.named || kill.proc.PID != 10 {
		t.Errorf("a: %+v, want pid 10 not named yet", kill)
	}
	if kill := k.find("bbbbbbbbbbbb"); kill == nil || !kill.named || kill.proc.Command != "[b]" || kill.proc.RSSBytes != 2<<10 {
		t.Errorf("b: %+v", kill)
	}
	k.record(killed(10, "a"))
	k.record(summary("aaaaaaaaaaaa", 30))
	k.record(killed(30, "a2"))
	if kill := k.find("aaaaaaaaaaaa"); kill == nil || kill.proc.Command != "[a2]" {
		t.Errorf("a, latest: %+v", kill)
	}
	if k.find("cccccccccccc") != nil {
		t.Error("a kill found for a group with none")
	}
	for i := range 2 * maxKills {
		k.record(summary(fmt.Sprintf("%012d", i), 100+i))
	}
	if len(k.kills) != maxKills || k.find(fmt.Sprintf("%012d", 2*maxKills-1)) == nil || k.find("bbbbbbbbbbbb") != nil {
		t.Errorf("%d kills kept", len(k.kills))
	}
}

// TestPMPath: a path the sandbox named is shown as printable text, at
// most maxPMPath bytes, valid UTF-8, its end (the file's own name) kept.
func TestPMPath(t *testing.T) {
	long := "/tmp/" + strings.Repeat("a", 300) + "/tail.bin"
	for _, tt := range []struct{ in, want string }{
		{"/tmp/big.bin", "/tmp/big.bin"},
		{"/tmp/a\nb\x1b[2J", "/tmp/a?b?[2J"},
		{"/tmp/\xff\xfe.bin", "/tmp/?.bin"}, // a run of invalid bytes is one "?"
		{"/tmp/\u00e9t\u00e9", "/tmp/\u00e9t\u00e9"},
		{long, long[:126] + "…" + long[len(long)-126:]},
	} {
		if got := pmPath(tt.in); got != tt.want {
			t.Errorf("pmPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzPMPath(f *testing.F) {
	f.Add("/tmp/big.bin")
	f.Add("/tmp/" + strings.Repeat("\u00e9", 200))
	f.Fuzz(func(t *testing.T, p string) {
		got := pmPath(p)
		if len(got) > maxPMPath || !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("pmPath(%q) = %q", p, got)
		}
	})
}

// TestTopEntries: the first by rank are kept, ties in the order found.
func TestTopEntries(t *testing.T) {
	var top []result.DiskEntry
	for i, b := range []int64{5, 9, 1, 9, 7, 3, 8, 2} {
		top = topEntries(top, result.DiskEntry{Path: string(rune('a' + i)), Bytes: b}, byBytes)
	}
	var got []string
	for _, e := range top {
		got = append(got, e.Path)
	}
	if strings.Join(got, "") != "bdgea" {
		t.Errorf("got %v, want b d g e a", got)
	}
}

func FuzzPostMortemRecords(f *testing.F) {
	f.Add("oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/a/b,task=t,pid=1,uid=2", "Memory cgroup out of memory: Killed process 1 (t) total-vm:1kB, anon-rss:1kB")
	f.Fuzz(func(t *testing.T, a, b string) {
		oomKillRecord(a)
		killedRecord(b, 1)
		parseStat([]byte(a))
		_ = printable(b)
	})
}
