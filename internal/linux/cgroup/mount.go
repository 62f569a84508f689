package cgroup

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// mountEntry is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mountEntry struct {
	root   string   // path inside the hierarchy that is mounted (field 4)
	point  string   // mount point (field 5)
	fstype string   // "cgroup" or "cgroup2"
	opts   []string // super options; for v1 they name the controllers
}

// parseMountInfo extracts the cgroup and cgroup2 mounts from mountinfo
// content. Malformed lines are skipped: the file comes from the kernel, and
// one odd line (say, a mount point with an unusual escape) should not hide
// the cgroup mounts.
func parseMountInfo(data []byte) []mountEntry {
	var out []mountEntry
	for line := range bytes.Lines(data) {
		fields := strings.Fields(string(line))
		// Optional fields come between field 6 and the "-" separator, so
		// the separator has to be found rather than indexed.
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			continue
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mountEntry{
			root:   unescapeMount(fields[3]),
			point:  unescapeMount(fields[4]),
			fstype: fstype,
			opts:   strings.Split(fields[sep+3], ","),
		})
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for space and so on) the
// kernel applies to paths in mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// procCgroupPath finds, in /proc/<pid>/cgroup content, the path of the v1
// hierarchy that carries controller ctrl. Lines are "id:controllers:path";
// the path may itself contain colons, so only the first two are split on.
func procCgroupPath(data []byte, ctrl string) (string, bool) {
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\n")
		_, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		ctrls, path, ok := bytes.Cut(rest, []byte{':'})
		if !ok {
			continue
		}
		for c := range bytes.SplitSeq(ctrls, []byte{','}) {
			if string(c) == ctrl {
				return string(path), true
			}
		}
	}
	return "", false
}

// The v1 controllers airlock uses. Each one's index is fixed so the rest of
// the package can name hierarchies without map lookups.
const (
	ctrlMemory = iota
	ctrlPids
	ctrlCPU
	ctrlCPUAcct
	ctrlFreezer
	numCtrls
)

var v1Ctrls = [numCtrls]string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// hierarchy is one mounted v1 hierarchy that carries at least one of the
// controllers above. Controllers mounted together (typically cpu and
// cpuacct) share one hierarchy, and the package then creates, enters and
// removes one directory instead of two.
type hierarchy struct {
	name  string // the first of our controllers on it, for messages and /proc/<pid>/cgroup
	point string // mount point
	root  string // path inside the hierarchy mounted at point
}

// v1Layout is where this host mounts the controllers airlock needs.
type v1Layout struct {
	hier []hierarchy
	// idx maps each controller to its hierarchy in hier.
	idx [numCtrls]int
}

// discoverV1 finds the mounts of the v1 controllers airlock needs.
func discoverV1(mounts []mountEntry) (*v1Layout, error) {
	l := &v1Layout{}
	byPoint := map[string]int{}
	for c, name := range v1Ctrls {
		m, ok := findV1Mount(mounts, name)
		if !ok {
			return nil, fmt.Errorf("cgroup v1 controller %q is not mounted (no cgroup mount with option %q in /proc/self/mountinfo)", name, name)
		}
		i, seen := byPoint[m.point]
		if !seen {
			i = len(l.hier)
			byPoint[m.point] = i
			l.hier = append(l.hier, hierarchy{name: name, point: m.point, root: m.root})
		}
		l.idx[c] = i
	}
	return l, nil
}

// findV1Mount returns the mount of controller name, preferring one that
// shows the whole hierarchy (root "/") over a bind mount of a subtree.
func findV1Mount(mounts []mountEntry, name string) (mountEntry, bool) {
	var found mountEntry
	ok := false
	for _, m := range mounts {
		if m.fstype != "cgroup" || !slices.Contains(m.opts, name) {
			continue
		}
		if !ok || (found.root != "/" && m.root == "/") {
			found, ok = m, true
		}
	}
	return found, ok
}
