package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/e2b"
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

// TestE2BSnapshotAttacks tries, on the wire, what another key or a bad
// request may do with snapshots and forks: another key's snapshot as a
// template is not found, as a template that is not there (and no
// sandbox is made); a fork of another key's sandbox is not found; a
// fork of no sandboxes, or of more than the most, and a bad name are
// refused; a snapshot asking for the processes is refused by name.
func TestE2BSnapshotAttacks(t *testing.T) {
	isolatednet.Require(t)
	base := serveE2B(t, "")
	const otherKey = "other-0123456789abcdef"
	do := func(method, path, key, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	sb := e2bCreate(t, base)
	status, b := do("POST", "/sandboxes/"+sb.SandboxID+"/snapshots", e2bKey, `{"name":"kept"}`)
	var info e2b.SnapshotInfo
	if status != 201 || json.Unmarshal(b, &info) != nil || info.SnapshotID != "kept" {
		t.Fatalf("snapshot: %d %s", status, b)
	}
	status, b = do("POST", "/sandboxes/"+sb.SandboxID+"/snapshots", e2bKey, `{}`)
	var unnamed e2b.SnapshotInfo
	if status != 201 || json.Unmarshal(b, &unnamed) != nil || !strings.HasPrefix(unnamed.SnapshotID, "snap_") {
		t.Fatalf("snapshot: %d %s", status, b)
	}
	_, unknown := do("POST", "/v2/sandboxes", otherKey, `{"templateID":"nosuch"}`)
	for _, tt := range []struct {
		name, method, path, key, body string
		status                        int
		says                          string
	}{
		{"another key's snapshot by name", "POST", "/v2/sandboxes", otherKey, `{"templateID":"kept"}`, 404, `no template \"kept\"`},
		{"another key's snapshot by id", "POST", "/sandboxes", otherKey, `{"templateID":"` + unnamed.SnapshotID + `"}`, 404, `no template \"` + unnamed.SnapshotID + `\"`},
		{"another key's delete", "DELETE", "/templates/kept", otherKey, ``, 404, `no snapshot \"kept\"`},
		{"another key's snapshot of the sandbox", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", otherKey, `{}`, 404, "not found"},
		{"another key's fork", "POST", "/sandboxes/" + sb.SandboxID + "/fork", otherKey, `{"count":1}`, 404, "not found"},
		{"a fork of none", "POST", "/sandboxes/" + sb.SandboxID + "/fork", e2bKey, `{"count":0}`, 400, "1 to 100"},
		{"a fork of too many", "POST", "/sandboxes/" + sb.SandboxID + "/fork", e2bKey, `{"count":101}`, 400, "1 to 100"},
		{"a fork of fewer than none", "POST", "/sandboxes/" + sb.SandboxID + "/fork", e2bKey, `{"count":-1}`, 400, "1 to 100"},
		{"a fork's timeout", "POST", "/sandboxes/" + sb.SandboxID + "/fork", e2bKey, `{"timeout":0}`, 400, "timeout 0 s"},
		{"a name of a path", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"name":"../x"}`, 400, "snapshot name"},
		{"a name of an id", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"name":"snap_x"}`, 400, "may not begin"},
		{"a name too long", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"name":"` + strings.Repeat("a", 65) + `"}`, 400, "1 to 64"},
		{"a template's name", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"name":"small"}`, 400, "is a template's"},
		{"a name used", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"name":"kept"}`, 409, "exists"},
		{"the processes too", "POST", "/sandboxes/" + sb.SandboxID + "/snapshots", e2bKey, `{"memory":true}`, 501, "files (the workspace and /tmp) only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := do(tt.method, tt.path, tt.key, tt.body)
			if status != tt.status || !strings.Contains(string(b), tt.says) {
				t.Errorf("got %d %s, want %d saying %s", status, b, tt.status, tt.says)
			}
		})
	}
	// Not found as a template that is not there: the same words.
	_, theirs := do("POST", "/v2/sandboxes", otherKey, `{"templateID":"kept"}`)
	if got, want := strings.ReplaceAll(string(theirs), "kept", "X"), strings.ReplaceAll(string(unknown), "nosuch", "X"); got != want {
		t.Errorf("another key's snapshot answered %s; an unknown template %s", theirs, unknown)
	}
	// Nothing was made for the other key, and the snapshot is still its
	// owner's.
	if status, b := do("GET", "/v2/sandboxes", otherKey, ""); status != 200 || strings.TrimSpace(string(b)) != "[]" {
		t.Errorf("the other key's sandboxes: %d %s", status, b)
	}
	if status, b := do("GET", "/snapshots?name=kept", e2bKey, ""); status != 200 || !strings.Contains(string(b), `"snapshotID":"kept"`) {
		t.Errorf("the owner's snapshot after the attempts: %d %s", status, b)
	}
}
