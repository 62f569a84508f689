package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestE2BVolumeJS drives volumes through E2B's JavaScript SDK
// (testdata/e2b_volume.mjs): a volume outlives the sandbox that wrote it
// (by a command and by the files API) and is read by the next, mounted
// by name elsewhere; it cannot be destroyed while mounted; a mount in
// /home/user is refused naming where volumes go; the content API is
// refused by name; another key neither sees, mounts nor destroys it.
func TestE2BVolumeJS(t *testing.T) {
	sdk := e2bSDK(t)
	isolatednet.Require(t)
	base := serveE2B(t, "")
	cmd := exec.Command("node", "testdata/e2b_volume.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey,
		"E2B_VOLUME_API_URL="+base, "OTHER_KEY=other-0123456789abcdef")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"created":      `{"id":true,"name":"data","token":true}`,
		"written":      `"sandbox\n"`,
		"info":         `[{"name":"data","path":"/mnt/data"}]`,
		"listed":       `[{"name":"data","path":"/mnt/data"}]`,
		"read":         `"kept\nby the files API"`,
		"readfiles":    `"kept\n"`,
		"entries":      `["f","lost+found","sub"]`,
		"list":         `[[true,"data"]]`,
		"getinfo":      `[true,"data"]`,
		"connect":      `"data"`,
		"otherlist":    `[]`,
		"otherget":     `"VolumeNotFoundError"`,
		"otherdestroy": `false`,
		"destroy":      `true`,
		"destroyagain": `false`,
		"after":        `[]`,
	}
	for k, v := range want {
		if got := string(steps[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	for k, says := range map[string][]string{
		"destroyattached": {"409", "mounted in a sandbox"},
		"home":            {"400", "/home/user/data", "choose another place, like /srv"},
		"content":         {"501", "mount the volume in a sandbox"},
		"othermount":      {"404", `volume \"data\" not found`},
	} {
		for _, s := range says {
			if !strings.Contains(string(steps[k]), s) {
				t.Errorf("%s: %s; want it to say %q", k, steps[k], s)
			}
		}
	}
	if t.Failed() {
		t.Logf("the SDK said:\n%s\n%s", outb, stderr.String())
	}
}

// TestE2BVolumeAttacks: a create's volumeMounts that climb out, land in
// what airlock builds, are relative, name another key's volume or are
// too many are refused before any sandbox is made, and another key can
// neither read nor delete the volume; the files API's writes into a
// mounted volume stay inside it whatever the sandbox planted there
// (symlinks to /, to /etc, climbing with ..) and whatever .. the path
// holds, checked from the host and from the sandbox.
func TestE2BVolumeAttacks(t *testing.T) {
	isolatednet.Require(t)
	d, base := serveE2BDaemon(t, "", nil)
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
	var vol e2b.VolumeAndToken
	if status, b := do("POST", "/volumes", e2bKey, `{"name":"mine"}`); status != 201 || json.Unmarshal(b, &vol) != nil || !strings.HasPrefix(vol.VolumeID, "vol_") {
		t.Fatalf("create: %d %s", status, b)
	}
	if status, b := do("POST", "/volumes", otherKey, `{"name":"theirs"}`); status != 201 {
		t.Fatalf("create: %d %s", status, b)
	}
	mount := func(mounts string) string { return `{"templateID":"sh","volumeMounts":` + mounts + `}` }
	nine := strings.Repeat(`{"name":"mine","path":"/mnt/a"},`, 8) + `{"name":"mine","path":"/mnt/b"}`
	for _, tt := range []struct {
		name, method, path, key, body string
		status                        int
		says                          string
	}{
		{"climbing out", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"/mnt/../etc"}]`), 400, `\"/mnt/../etc\": want an absolute, clean path`},
		{"the workspace", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"/workspace/x"}]`), 400, `\"/workspace/x\": /workspace is built by airlock`},
		{"/etc", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"/etc"}]`), 400, `/etc is built by airlock`},
		{"relative", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"mnt/x"}]`), 400, `want an absolute, clean path`},
		{"home", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"/home/user/data"}]`), 400, `choose another place, like /srv`},
		{"too many", "POST", "/v2/sandboxes", e2bKey, mount(`[` + nine + `]`), 400, `at most 8`},
		{"another key's volume by name", "POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"theirs","path":"/mnt/x"}]`), 404, `volume \"theirs\" not found`},
		{"by another key", "POST", "/v2/sandboxes", otherKey, mount(`[{"name":"mine","path":"/mnt/x"}]`), 404, `volume \"mine\" not found`},
		{"another key's volume by id", "POST", "/v2/sandboxes", otherKey, mount(`[{"name":"` + vol.VolumeID + `","path":"/mnt/x"}]`), 404, `not found`},
		{"another key's get", "GET", "/volumes/" + vol.VolumeID, otherKey, ``, 404, `not found`},
		{"another key's delete", "DELETE", "/volumes/" + vol.VolumeID, otherKey, ``, 404, `not found`},
		{"the content API", "GET", "/volumecontent/" + vol.VolumeID + "/file?path=/x", "", ``, 501, `mount the volume in a sandbox`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := do(tt.method, tt.path, tt.key, tt.body)
			if status != tt.status || !bytes.Contains(b, []byte(tt.says)) {
				t.Errorf("got %d %s, want %d with %s", status, b, tt.status, tt.says)
			}
		})
	}
	if ss := d.SessionsOf(node.Local); len(ss) != 0 {
		t.Errorf("%d sessions were opened by the refused creates", len(ss))
	}

	var sb e2b.Sandbox
	if status, b := do("POST", "/v2/sandboxes", e2bKey, mount(`[{"name":"mine","path":"/mnt/v"}]`)); status != 201 || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create with the volume: %d %s", status, b)
	}
	marker := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(marker, []byte("HOST\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2bRun(t, base, sb, "mkdir /mnt/v/d && ln -s / /mnt/v/root && ln -s /etc /mnt/v/etc && ln -s ../../.. /mnt/v/d/up && ln -s "+marker+" /mnt/v/host")
	write := func(p, data string) (int, []byte) {
		q := url.Values{"path": {p}}
		return e2bDo(t, "POST", base+"/files?"+q.Encode(), &sb, map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader(data))
	}
	// A write through a planted symlink is refused (inroot never follows
	// one on a write), whatever it points at; .. inside the volume is
	// cleaned and stays in it.
	for _, p := range []string{"/mnt/v/root/etc/planted", "/mnt/v/etc/planted", "/mnt/v/d/up/etc/planted", "/mnt/v/host"} {
		if status, b := write(p, "through "+p); status != 400 || !bytes.Contains(b, []byte("symlink")) {
			t.Errorf("write %s: %d %s, want it refused", p, status, b)
		}
	}
	if status, b := write("/mnt/v/d/../../v/ok", "kept"); status != 200 || !bytes.Contains(b, []byte(`"path":"/mnt/v/ok"`)) {
		t.Errorf("write /mnt/v/d/../../v/ok: %d %s, want /mnt/v/ok written", status, b)
	}
	// Paths whose .. leave the volume are cleaned first: they land in
	// the read-only root, and are refused.
	if status, b := write("/mnt/v/../../etc/planted", "x"); status < 400 {
		t.Errorf("a write to /etc through ..: %d %s, want it refused", status, b)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "HOST\n" {
		t.Errorf("the host's file: %q %v, want it unchanged", b, err)
	}
	if _, err := os.Lstat("/etc/planted"); err == nil {
		os.Remove("/etc/planted")
		t.Error("/etc/planted was written on the host")
	}
	// In the sandbox: its /etc untouched, the one file written in the
	// volume, the symlinks as planted.
	got := e2bRun(t, base, sb, "ls /etc/planted 2>&1 >/dev/null | wc -l; cd /mnt/v && find . -type f | sort; cat ok; readlink host")
	if want := "1\n./ok\nkept" + marker + "\n"; got != want {
		t.Errorf("the sandbox sees %q, want %q", got, want)
	}
}
