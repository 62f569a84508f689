package daemon

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/sandbox"
)

// e2bDo sends one call to the E2B API at base, as the sandbox sb's envd
// client when sb is given, and returns the status and body.
func e2bDo(t *testing.T, method, u string, sb *e2b.Sandbox, hdr map[string]string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if sb != nil {
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// hostWorkspace is the workspace of sandbox id as the host sees it,
// through its init's root.
func hostWorkspace(t *testing.T, d *Daemon, id string) string {
	t.Helper()
	d.e2b.mu.Lock()
	sb := d.e2b.m[id]
	d.e2b.mu.Unlock()
	if sb == nil {
		t.Fatalf("no sandbox %s", id)
	}
	return filepath.Join("/proc", strconv.Itoa(sb.s.sb.InitPid()), "root", sandbox.HomeDir)
}

// TestE2BSignedURLKeepsItsOperation: the SDK signs "path:op:user:token"
// without delimiters, so a download URL for a path holding ":write:"
// signed what an upload of a shorter path by a user ":read:" signs. The
// download URL, used as that upload, must write nothing (checked in the
// sandbox's workspace from the host).
func TestE2BSignedURLKeepsItsOperation(t *testing.T) {
	d, base := serveE2BDaemon(t, "", nil)
	sb := e2bCreate(t, base)
	// What the SDK's downloadUrl("/workspace/x:write:") gives.
	sig := e2b.Signature("/workspace/x:write:", "read", "", sb.EnvdAccessToken, 0)
	// The same signature over another split of the same string.
	if again := e2b.Signature("/workspace/x", "write", ":read:", sb.EnvdAccessToken, 0); again != sig {
		t.Fatalf("the attack's premise: %s and %s differ", sig, again)
	}
	q := url.Values{"path": {"/workspace/x"}, "username": {":read:"}, "signature": {sig}}
	status, b := e2bDo(t, "POST", base+"/files?"+q.Encode(), nil, map[string]string{"Content-Type": "application/octet-stream"}, bytes.NewReader([]byte("planted")))
	if status == http.StatusOK {
		t.Errorf("a download URL used as an upload: %d %s", status, b)
	}
	if _, err := os.Lstat(filepath.Join(hostWorkspace(t, d, sb.SandboxID), "x")); !os.IsNotExist(err) {
		t.Errorf("the download URL wrote /workspace/x (%v)", err)
	}
	// The download itself is refused as well (its path holds ':'), with
	// a reason, rather than served.
	q = url.Values{"path": {"/workspace/x:write:"}, "signature": {sig}}
	if status, b := e2bDo(t, "GET", base+"/files?"+q.Encode(), nil, nil, nil); status != http.StatusBadRequest || !bytes.Contains(b, []byte("may not contain ':'")) {
		t.Errorf("a signed URL of a path with ':': %d %s, want 400", status, b)
	}
	// A signed URL without ':' works as it did.
	q = url.Values{"path": {"/workspace/y"}, "signature": {e2b.Signature("/workspace/y", "write", "", sb.EnvdAccessToken, 0)}}
	if status, b := e2bDo(t, "POST", base+"/files?"+q.Encode(), nil, map[string]string{"Content-Type": "application/octet-stream"}, bytes.NewReader([]byte("ok"))); status != http.StatusOK {
		t.Errorf("a signed upload: %d %s", status, b)
	}
	if got, err := os.ReadFile(filepath.Join(hostWorkspace(t, d, sb.SandboxID), "y")); string(got) != "ok" {
		t.Errorf("the signed upload wrote %q (%v)", got, err)
	}
}
