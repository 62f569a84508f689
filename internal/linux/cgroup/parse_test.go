package cgroup

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseValue(t *testing.T) {
	const (
		memoryEvents = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n"
		oomControl   = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"
		pidsEvents   = "max 4\nmax.imposed 9\n"
		cpuStat      = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\ncore_sched.force_idle_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n"
		cgroupEvents = "populated 1\nfrozen 0\n"
	)
	tests := []struct {
		name, data, key string
		want            int64
		wantErr         bool
	}{
		{"plain", "4096\n", "", 4096, false},
		{"plain no newline", "17", "", 17, false},
		{"zero", "0\n", "", 0, false},
		{"int64 max", "9223372036854775807\n", "", 1<<63 - 1, false},
		{"overflow", "9223372036854775808\n", "", 0, true},
		{"empty", "", "", 0, true},
		{"garbage", "12a\n", "", 0, true},
		{"negative", "-1\n", "", 0, true},
		{"max is not a counter", "max\n", "", 0, true},
		{"memory.events oom_kill", memoryEvents, "oom_kill", 2, false},
		{"memory.events oom", memoryEvents, "oom", 3, false},
		{"memory.events max", memoryEvents, "max", 12, false},
		{"oom_control oom_kill not oom_kill_disable", oomControl, "oom_kill", 7, false},
		{"oom_control before 4.13", "oom_kill_disable 0\nunder_oom 0\n", "oom_kill", 0, false},
		{"pids.events max not max.imposed", pidsEvents, "max", 4, false},
		{"pids.events max.imposed", pidsEvents, "max.imposed", 9, false},
		{"cpu.stat usage_usec", cpuStat, "usage_usec", 1234567, false},
		{"cpu.stat system_usec", cpuStat, "system_usec", 234567, false},
		{"cpu.stat truncated after the line", "usage_usec 5\nuser_u", "usage_usec", 5, false},
		{"last line without newline", "a 1\nb 2", "b", 2, false},
		{"cgroup.events populated", cgroupEvents, "populated", 1, false},
		{"cgroup.events frozen", cgroupEvents, "frozen", 0, false},
		{"missing key", cgroupEvents, "nope", 0, false},
		{"key without value", "populated\n", "populated", 0, false},
		{"bad value", "populated x\n", "populated", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseValue([]byte(tc.data), tc.key)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseValue(%q, %q) = %d, %v; want %d, error %v", tc.data, tc.key, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseValueAllocs(t *testing.T) {
	data := []byte("usage_usec 1234567\nuser_usec 1000000\n")
	if n := testing.AllocsPerRun(100, func() { _, _ = parseValue(data, "user_usec") }); n != 0 {
		t.Errorf("parseValue allocates %v times per call, want 0", n)
	}
}

func TestParseMountInfo(t *testing.T) {
	const data = `22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 master:2 - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
40 30 0:37 / /sys/fs/cgroup/uni\040fied rw,relatime - cgroup2 cgroup2 rw,nsdelegate
41 30 0:38 / /broken rw - cgroup
bad line
`
	want := []mountEntry{
		{root: "/", point: "/sys/fs/cgroup/cpu,cpuacct", fstype: "cgroup", opts: []string{"rw", "cpu", "cpuacct"}},
		{root: "/docker/abc", point: "/sys/fs/cgroup/memory", fstype: "cgroup", opts: []string{"rw", "memory"}},
		{root: "/", point: "/sys/fs/cgroup/systemd", fstype: "cgroup", opts: []string{"rw", "xattr", "name=systemd"}},
		{root: "/", point: "/sys/fs/cgroup/uni fied", fstype: "cgroup2", opts: []string{"rw", "nsdelegate"}},
	}
	if got := parseMountInfo([]byte(data)); !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountInfo:\ngot  %+v\nwant %+v", got, want)
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/a\040b`, "/a b"},
		{`/tab\011x`, "/tab\tx"},
		{`/back\134slash`, `/back\slash`},
		{`/short\04`, `/short\04`},
		{`/not\999octal`, `/not\999octal`},
	}
	for _, tc := range tests {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestProcCgroupPath(t *testing.T) {
	const data = "9:name=systemd:/user.slice\n8:pids:/airlock/x\n2:cpu,cpuacct:/a:b\n4:memory:/process/1\n0::/unified\n"
	tests := []struct {
		ctrl, want string
		ok         bool
	}{
		{"pids", "/airlock/x", true},
		{"cpu", "/a:b", true},
		{"cpuacct", "/a:b", true},
		{"memory", "/process/1", true},
		{"name=systemd", "/user.slice", true},
		{"freezer", "", false},
		{"", "/unified", true}, // the v2 line has an empty controller list
	}
	for _, tc := range tests {
		got, ok := procCgroupPath([]byte(data), tc.ctrl)
		if got != tc.want || ok != tc.ok {
			t.Errorf("procCgroupPath(%q) = %q, %v; want %q, %v", tc.ctrl, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHostDir(t *testing.T) {
	tests := []struct {
		root, cg, want string
		wantErr        bool
	}{
		{"/", "/airlock/x", "/m/airlock/x", false},
		{"/", "/", "/m", false},
		{"/docker/abc", "/docker/abc/airlock", "/m/airlock", false},
		{"/docker/abc", "/docker/abc", "/m", false},
		{"/docker/abc", "/docker/abcd", "", true},
		{"/docker/abc", "/other", "", true},
	}
	for _, tc := range tests {
		h := hierarchy{name: "memory", point: "/m", root: tc.root}
		got, err := h.hostDir(tc.cg)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("hostDir(root %q, %q) = %q, %v; want %q, error %v", tc.root, tc.cg, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestValidIDAndParent(t *testing.T) {
	ids := []struct {
		id string
		ok bool
	}{
		{"a", true}, {"abc-123", true}, {strings.Repeat("z", 64), true},
		{"", false}, {strings.Repeat("z", 65), false}, {"A", false}, {"a_b", false},
		{"a.b", false}, {"..", false}, {"a/b", false}, {"é", false},
	}
	for _, tc := range ids {
		if err := validID(tc.id); (err == nil) != tc.ok {
			t.Errorf("validID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
	parents := []struct {
		in, want string
		ok       bool
	}{
		{"/airlock", "/airlock", true},
		{"/airlock/", "/airlock", true},
		{"/a//b/../c", "/a/c", true},
		{"airlock", "", false},
		{"", "", false},
		{"/", "", false},
		{"/..", "", false},
	}
	for _, tc := range parents {
		got, err := cleanParent(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("cleanParent(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	tests := []struct{ milli, want int64 }{
		{1000, 100000},
		{1500, 150000},
		{250, 25000},
		{10, 1000},
		{1, 1000}, // below the kernel's 1ms minimum: raised to it
		{16000, 1600000},
	}
	for _, tc := range tests {
		if got := cpuQuota(tc.milli); got != tc.want {
			t.Errorf("cpuQuota(%d) = %d, want %d", tc.milli, got, tc.want)
		}
	}
}

func TestHasWord(t *testing.T) {
	tests := []struct {
		list, w string
		want    bool
	}{
		{"cpuset cpu io memory pids\n", "cpu", true},
		{"cpuset cpu io memory pids\n", "pids", true},
		{"cpuset io memory\n", "cpu", false},
		{"", "memory", false},
		{"hugetlb\n", "memory", false},
	}
	for _, tc := range tests {
		if got := hasWord([]byte(tc.list), tc.w); got != tc.want {
			t.Errorf("hasWord(%q, %q) = %v, want %v", tc.list, tc.w, got, tc.want)
		}
	}
}

// TestDiscoverV1 runs the v1 layout discovery over fake mounts: it reads
// nothing but the mount table, so no root is needed.
func TestDiscoverV1(t *testing.T) {
	dir := "/sys/fs/cgroup"
	m := func(point string, ctrls ...string) mountEntry {
		return mountEntry{root: "/", point: filepath.Join(dir, point), fstype: "cgroup", opts: append([]string{"rw"}, ctrls...)}
	}
	full := []mountEntry{
		m("memory", "memory"), m("pids", "pids"), m("cpu,cpuacct", "cpu", "cpuacct"),
		m("freezer", "freezer"), m("systemd", "name=systemd"),
	}

	l, err := discoverV1(full)
	if err != nil {
		t.Fatalf("discoverV1: %v", err)
	}
	var names []string
	for _, h := range l.hier {
		names = append(names, h.name)
	}
	if want := []string{"memory", "pids", "cpu", "freezer"}; !reflect.DeepEqual(names, want) {
		t.Errorf("hierarchies = %q, want %q (cpu and cpuacct share one)", names, want)
	}
	if l.idx[ctrlCPU] != l.idx[ctrlCPUAcct] {
		t.Errorf("cpu in hierarchy %d, cpuacct in %d; want the same", l.idx[ctrlCPU], l.idx[ctrlCPUAcct])
	}
	// A controller mounted at a directory not named after it (no
	// symlink leads there either) is found by its mount point alone.
	odd, err := discoverV1(append([]mountEntry{m("odd-memory", "memory")}, full[1:]...))
	if err != nil {
		t.Fatalf("discoverV1 with memory at odd-memory: %v", err)
	}
	if got, want := odd.hier[odd.idx[ctrlMemory]].point, filepath.Join(dir, "odd-memory"); got != want {
		t.Errorf("memory hierarchy at %s, want %s", got, want)
	}

	tests := []struct {
		name   string
		mounts []mountEntry
		want   string
	}{
		{"pids missing", []mountEntry{full[0], full[2], full[3]}, `controller "pids" is not mounted`},
		{"freezer missing", full[:3], `controller "freezer" is not mounted`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := discoverV1(tc.mounts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("discoverV1 error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParsePids(t *testing.T) {
	got := parsePids([]byte("12\n345\n\nx\n-1\n7"))
	want := []int{12, 345, 7}
	if !slices.Equal(got, want) {
		t.Fatalf("parsePids = %v, want %v", got, want)
	}
}
