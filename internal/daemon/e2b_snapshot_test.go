package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestE2BSnapshotJS drives snapshots and forks with E2B's JavaScript SDK
// (testdata/e2b_snapshot.mjs): a snapshot keeps the workspace and /tmp,
// the sandboxes made from it (by the snapshotId it answered) start with
// them and apart from each other, a fork makes running sandboxes with the
// files, and another key neither lists, uses nor deletes it.
func TestE2BSnapshotJS(t *testing.T) {
	sdk := e2bSDK(t)
	isolatednet.Require(t)
	base := serveE2B(t, "")
	cmd := exec.Command("node", "testdata/e2b_snapshot.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "OTHER_KEY=other-0123456789abcdef")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"created":         `{"snapshotId":"snap-js","names":["snap-js"]}`,
		"stillrunning":    `["running","up\n"]`,
		"listed":          `["snap-js"]`,
		"listedofsandbox": `["snap-js"]`,
		"listedbyname":    `["snap-js"]`,
		"otherlist":       `[]`,
		"otherdelete":     `false`,
		"fromsnapshot":    `[["snapped","tmp too"],["snapped","tmp too"],"sh"]`,
		"apart":           `["changed in a","snapped"]`,
		"forks":           `["sandbox","sandbox"]`,
		"forkfiles":       `[["snapped","tmp too"],["snapped","tmp too"]]`,
		"forkstate":       `["running","running"]`,
		"forkmetadata":    `[{"who":"source"},{"who":"source"}]`,
		"forkids":         `3`,
		"unnamed":         `[true,[]]`,
		"unnameddelete":   `true`,
		"deleted":         `true`,
		"deletedagain":    `false`,
		"listedafter":     `[]`,
	}
	for k, v := range want {
		if got := string(steps[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	// Another key's create names the snapshot as a template not found.
	if m := string(steps["othercreate"]); !strings.Contains(m, `no template \"snap-js\"`) {
		t.Errorf("another key's create from the snapshot: %s; want it not found", m)
	}
	if t.Failed() {
		t.Logf("the SDK said:\n%s\n%s", outb, stderr.String())
	}
}
