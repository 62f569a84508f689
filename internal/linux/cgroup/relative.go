package cgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ResolveParent turns a parent given relative to the calling process's
// own cgroup ("sandboxes", no leading slash) into an absolute one, and
// returns an absolute parent as it is. On cgroup v2 the process's own
// cgroup is the "0::" line of /proc/self/cgroup; when the process has
// already moved into its SupervisorGroup leaf (Open), the group above
// the leaf is its own, so the answer does not change once it has moved.
//
// A relative parent is how a process places its sandboxes below itself
// without knowing where it was started: a privileged Kubernetes pod,
// which containerd gives no cgroup namespace of its own, sees the host's
// whole hierarchy, and an absolute parent would put the sandboxes
// outside the pod, out of the kubelet's accounting and limits. On a host
// with cgroup v1 controllers each hierarchy places a process apart, so
// a relative parent is refused there.
func ResolveParent(parent string) (string, error) {
	if strings.HasPrefix(parent, "/") {
		return parent, nil
	}
	if parent == "" || path.Clean(parent) != parent || parent == "." || strings.HasPrefix(parent, "../") || parent == ".." {
		return "", fmt.Errorf("cgroup: parent %q: want an absolute cgroup path (/airlock) or a clean path below this process's own cgroup (sandboxes)", parent)
	}
	v, err := Detect()
	if err != nil {
		return "", err
	}
	if v != V2 {
		return "", errors.New("cgroup: a parent relative to this process's own cgroup (" + parent + ") needs cgroup v2 only: with v1 controllers each hierarchy places a process apart; give an absolute one")
	}
	own, err := ownCgroupV2()
	if err != nil {
		return "", err
	}
	return resolveRelative(own, parent), nil
}

// resolveRelative joins parent to own, the process's cgroup, taking the
// group above a SupervisorGroup leaf for own.
func resolveRelative(own, parent string) string {
	if path.Base(own) == SupervisorGroup {
		own = path.Dir(own)
	}
	return path.Join("/", own, parent)
}
