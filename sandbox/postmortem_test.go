package sandbox

import (
	"strings"
	"testing"
	"time"

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
		// 25,000 files take longer than the default 20 s time ceiling in
		// the emulated guest beside the host's tests: the time is 2 min.
		{"disk, inodes", limits(func(l *Limits) { l.Disk = 64 << 20; l.Inodes = 25000; l.Time = 2 * time.Minute }),
			// More files than the walk reads: it stops, and says so.
			[]string{"python3", "-c", "import os, time\nos.mkdir('/tmp/many')\ntry:\n    for i in range(30000):\n        open('/tmp/many/f%d' % i, 'w').close()\nexcept OSError:\n    pass\ntime.sleep(15)"},
			func(pm *result.PostMortem) bool {
				d := pm.Directories
				// The budget may end the walk first on a slow host (958
				// entries read in the cgroup-v2 guest once).
				return len(d) > 0 && d[0].Path == "/tmp/many" && d[0].Entries >= 100 &&
					(strings.Contains(pm.Note, "only the first 20000 entries were read") || strings.Contains(pm.Note, "time budget"))
			}},
		// A second, so that both sleeps run when it ends on the emulated
		// guest too (300 ms was once before them there).
		{"time", limits(func(l *Limits) { l.Time = time.Second }),
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
