package cgroup

import (
	"strings"
	"testing"
)

func TestResolveRelative(t *testing.T) {
	for _, tc := range []struct{ own, parent, want string }{
		{"/", "sandboxes", "/sandboxes"},
		{"/system.slice/airlock.service", "sandboxes", "/system.slice/airlock.service/sandboxes"},
		// Once moved aside, the same answer.
		{"/system.slice/airlock.service/airlock.supervisor", "sandboxes", "/system.slice/airlock.service/sandboxes"},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-ab.scope", "sandboxes/a",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-ab.scope/sandboxes/a"},
	} {
		if got := resolveRelative(tc.own, tc.parent); got != tc.want {
			t.Errorf("resolveRelative(%q, %q) = %q, want %q", tc.own, tc.parent, got, tc.want)
		}
	}
}

func TestResolveParentRefuses(t *testing.T) {
	if got, err := ResolveParent("/airlock"); err != nil || got != "/airlock" {
		t.Errorf("an absolute parent: %q %v", got, err)
	}
	for _, p := range []string{"", ".", "..", "../x", "a/../..", "a//b", "a/"} {
		if _, err := ResolveParent(p); err == nil || !strings.Contains(err.Error(), "want an absolute cgroup path") {
			t.Errorf("ResolveParent(%q): %v, want a refusal", p, err)
		}
	}
}
