package daemon

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/e2bserver"
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
	sb := d.e2b.SessionOf(id)
	if sb == nil {
		t.Fatalf("no sandbox %s", id)
	}
	return filepath.Join("/proc", strconv.Itoa(sb.Sandbox().InitPid()), "root", sandbox.HomeDir)
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

// multipartUpload is a raw multipart POST /files of sb's, cut in two:
// head is the request up to the end of its first part (file first), and
// tail its second part (file second) and the body's end.
func multipartUpload(base string, sb e2b.Sandbox, first, second string) (head, tail []byte) {
	const boundary = "b0undary"
	part := func(name string) string {
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + name + "\"\r\nContent-Type: application/octet-stream\r\n\r\ncontent of " + name + "\r\n"
	}
	// The first part ends where the second's delimiter is read: the
	// head holds it, the second part's headers come with the tail.
	p1 := part(first) + "--" + boundary + "\r\n"
	rest := strings.TrimPrefix(part(second), "--"+boundary+"\r\n") + "--" + boundary + "--\r\n"
	hdr := "POST /files HTTP/1.1\r\nHost: " + strings.TrimPrefix(base, "http://") + "\r\nE2b-Sandbox-Id: " + sb.SandboxID + "\r\nX-Access-Token: " + sb.EnvdAccessToken +
		"\r\nContent-Type: multipart/form-data; boundary=" + boundary + "\r\nContent-Length: " + strconv.Itoa(len(p1)+len(rest)) + "\r\n\r\n"
	return []byte(hdr + p1), []byte(rest)
}

// e2bKill deletes sandbox id through the API at base and returns the
// status, or -1 when no answer came within the wait.
func e2bKill(t *testing.T, base, id string, wait time.Duration) int {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "DELETE", base+"/sandboxes/"+id, nil)
	req.Header.Set("X-API-KEY", e2bKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestE2BUploadStalledBetweenParts: a multipart upload whose client stops
// sending between two parts is cut after the stall timeout, and while
// one is held its sandbox's owner can still end the sandbox at once.
// Before, the upload held the session for as long as its client liked,
// and the DELETE waited for it.
func TestE2BUploadStalledBetweenParts(t *testing.T) {
	d, base := serveE2BDaemon(t, "", func(o *Options) { o.StallTimeout = time.Second })
	addr := strings.TrimPrefix(base, "http://")
	upload := func(sb e2b.Sandbox) (net.Conn, *bufio.Reader) {
		t.Helper()
		head, _ := multipartUpload(base, sb, "one.txt", "two.txt")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(head); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	t.Run("cut after the stall timeout", func(t *testing.T) {
		sb := e2bCreate(t, base)
		c, br := upload(sb)
		// Generous: the bound is 1 s; the default would be 30 s.
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the stalled upload was not answered: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "stalled") {
			t.Errorf("the stalled upload: %s %s, want 408", resp.Status, b)
		}
		// The first part was written; the second never came.
		ws := hostWorkspace(t, d, sb.SandboxID)
		if got, err := os.ReadFile(filepath.Join(ws, "one.txt")); string(got) != "content of one.txt" {
			t.Errorf("the first part: %q %v", got, err)
		}
		if _, err := os.Lstat(filepath.Join(ws, "two.txt")); !os.IsNotExist(err) {
			t.Errorf("the second part, never sent, is there (%v)", err)
		}
	})
	t.Run("the owner's DELETE is not held", func(t *testing.T) {
		// A stall timeout far longer than the wait: the kill itself
		// must cut the upload.
		_, base = serveE2BDaemon(t, "", func(o *Options) { o.StallTimeout = 10 * time.Minute })
		addr = strings.TrimPrefix(base, "http://")
		sb := e2bCreate(t, base)
		c, br := upload(sb)
		time.Sleep(200 * time.Millisecond) // the first part is in
		if status := e2bKill(t, base, sb.SandboxID, 10*time.Second); status != http.StatusNoContent {
			t.Fatalf("DELETE with an upload held: %d, want 204 (-1: no answer)", status)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("the upload of a killed sandbox: %s %s, want 502 (E2B's answer for a sandbox that is gone)", resp.Status, b)
			}
		}
	})
}

// TestE2BUploadSandboxKilledBetweenParts: the sandbox of a multipart
// upload is killed between its parts, another sandbox made, and then
// the second part sent. Nothing of it may land anywhere: not in the new
// sandbox (whose init may have the old one's pid: the upload's first
// part reopened /proc/PID/root for every part), not on the host; and the
// daemon answers rather than panics on the sandbox's released ids.
func TestE2BUploadSandboxKilledBetweenParts(t *testing.T) {
	d, base := serveE2BDaemon(t, "", func(o *Options) { o.StallTimeout = time.Minute })
	sb := e2bCreate(t, base)
	second := "second-" + sb.SandboxID[len(sb.SandboxID)-8:] + ".txt"
	head, tail := multipartUpload(base, sb, "first.txt", second)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	oldPid := initPid(d, sb.SandboxID)
	killed := make(chan int, 1)
	go func() { killed <- e2bKill(t, base, sb.SandboxID, 30*time.Second) }()
	// Another tenant's sandbox, made once the first is gone.
	status := 0
	select {
	case status = <-killed:
	case <-time.After(5 * time.Second):
		// The DELETE is held (as it was before): make the other
		// sandbox anyway, and send the second part.
	}
	other := samePid(t, d, base, oldPid)
	_, _ = c.Write(tail)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusInternalServerError {
			t.Errorf("the upload of a killed sandbox: %s %s, want it refused (not written, no panic)", resp.Status, b)
		}
	}
	if status == 0 {
		status = <-killed
	}
	if status != http.StatusNoContent {
		t.Errorf("DELETE: %d, want 204 (-1: no answer)", status)
	}
	ws := hostWorkspace(t, d, other.SandboxID)
	for _, p := range []string{filepath.Join(ws, second), filepath.Join(ws, "first.txt"), filepath.Join("/", second), filepath.Join(sandbox.HomeDir, second)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v)", p, err)
		}
	}
	// Nowhere below the daemon's state either.
	_ = filepath.WalkDir(testStateDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Name() == second {
			t.Errorf("the second part landed at %s", p)
		}
		return nil
	})
}

// initPid is the host pid of sandbox id's init, or 0.
func initPid(d *Daemon, id string) int {
	if sb := d.e2b.SessionOf(id); sb != nil {
		return sb.Sandbox().InitPid()
	}
	return 0
}

// samePid makes a sandbox whose init has pid, once that pid is free
// again, as the kernel may: it sets the host's last pid just below it
// before each create (a warm pool's next sandbox is made after a
// claim), and gives up after some tries, returning the last sandbox.
func samePid(t *testing.T, d *Daemon, base string, pid int) e2b.Sandbox {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) || time.Now().After(deadline) {
			break
		}
	}
	var sb e2b.Sandbox
	for range 20 {
		_ = os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0)
		sb = e2bCreate(t, base)
		if initPid(d, sb.SandboxID) == pid {
			t.Logf("sandbox %s has the killed one's pid %d", sb.SandboxID, pid)
			return sb
		}
	}
	t.Logf("no sandbox got pid %d again; the checks go on without it", pid)
	return sb
}

// TestE2BUploadInflationBounded: a gzip upload inflates to no more than
// a plain one may carry, and a multipart one has at most e2bserver.MaxParts parts.
// Before, 40 KiB of gzip became four files of 8 MiB each (and a body of
// a million empty parts a million workspace writes).
func TestE2BUploadInflationBounded(t *testing.T) {
	d, base := serveE2BDaemon(t, "", nil)
	sb := e2bCreate(t, base)
	multipart := func(parts int, size int) *bytes.Buffer {
		var raw bytes.Buffer
		zero := make([]byte, size)
		for i := range parts {
			raw.WriteString("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"bomb" + strconv.Itoa(i) + "\"\r\n\r\n")
			raw.Write(zero)
			raw.WriteString("\r\n")
		}
		raw.WriteString("--b--\r\n")
		return &raw
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	multipart(4, 8<<20).WriteTo(zw)
	zw.Close()
	sent := gz.Len()
	status, b := e2bDo(t, "POST", base+"/files", &sb, map[string]string{"Content-Type": "multipart/form-data; boundary=b", "Content-Encoding": "gzip"}, &gz)
	if status == http.StatusOK {
		t.Errorf("%d bytes of gzip inflating to 32 MiB of files: %d %s", sent, status, b)
	}
	ws := hostWorkspace(t, d, sb.SandboxID)
	if _, err := os.Lstat(filepath.Join(ws, "bomb3")); !os.IsNotExist(err) {
		t.Errorf("the last file of the inflated body was written (%v)", err)
	}
	status, b = e2bDo(t, "POST", base+"/files", &sb, map[string]string{"Content-Type": "multipart/form-data; boundary=b"}, multipart(e2bserver.MaxParts+1, 0))
	if status != http.StatusBadRequest || !strings.Contains(string(b), "parts") {
		t.Errorf("%d parts: %d %s", e2bserver.MaxParts+1, status, b)
	}
}
