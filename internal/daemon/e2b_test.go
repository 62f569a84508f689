package daemon

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/e2bserver"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// e2bSDK is the official E2B SDK's entry point, which scripts/test
// installs pinned (e2b 2.51.0); the tests that drive airlock with it skip
// without it.
func e2bSDK(t *testing.T) string {
	dir := os.Getenv("AIRLOCK_TEST_E2B_MODULES")
	if dir == "" {
		t.Skip("AIRLOCK_TEST_E2B_MODULES is not set (scripts/test installs the E2B SDK)")
	}
	p := filepath.Join(dir, "e2b", "dist", "index.mjs")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("AIRLOCK_TEST_E2B_MODULES is set, but the SDK is not there: %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("the E2B SDK is installed but node is not on PATH")
	}
	return p
}

// e2bKey is the agent's API key, of the form some SDKs (JS 2.39) insist on:
// e2b_ and hex.
const e2bKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// serveE2B starts a daemon with the E2B API on a loopback port and
// returns its base URL.
func serveE2B(t *testing.T, extra string) string {
	t.Helper()
	return serveE2BWith(t, extra, nil)
}

// serveE2BWith is serveE2B with the daemon's options adjusted.
func serveE2BWith(t *testing.T, extra string, adjust func(*Options)) string {
	t.Helper()
	_, base := serveE2BDaemon(t, extra, adjust)
	return base
}

// serveE2BDaemon is serveE2BWith that also returns the daemon, for tests
// that check a sandbox from the host.
func serveE2BDaemon(t *testing.T, extra string, adjust func(*Options)) (*Daemon, string) {
	t.Helper()
	return serveE2BDaemonOn(t, extra, adjust, "")
}

// serveE2BDaemonOn is serveE2BDaemon with its own tools (sh, small) on
// gVisor when runsc is set.
func serveE2BDaemonOn(t *testing.T, extra string, adjust func(*Options), runsc string) (*Daemon, string) {
	t.Helper()
	iso := ""
	if runsc != "" {
		iso = "isolation: gvisor"
		inner := adjust
		adjust = func(o *Options) {
			o.Sandbox.Runsc = runsc
			if inner != nil {
				inner(o)
			}
		}
	}
	t.Setenv("TEST_E2B_KEY", e2bKey)
	t.Setenv("TEST_OTHER_KEY", "other-0123456789abcdef")
	addr := freePort(t)
	d, _ := serveConfig(t, `
server:
  e2b: `+addr+`
  tokens:
    - {name: agent, secret: key, tools: ["*"]}
    - {name: other, secret: other, tools: ["*"]}
secrets:
  key: {env: TEST_E2B_KEY}
  other: {env: TEST_OTHER_KEY}
tools:
  sh: {`+iso+`}
  small: {limits: {memory: 64MiB}`+strings.TrimSuffix(", "+iso, ", ")+`}
`+extra, adjust)
	return d, "http://" + addr
}

// e2bCreate creates a sandbox of tool sh through the E2B API at base.
func e2bCreate(t *testing.T, base string) e2b.Sandbox {
	t.Helper()
	return e2bCreateOf(t, base, "sh")
}

// e2bCreateOf creates a sandbox of the tool named template.
func e2bCreateOf(t *testing.T, base, template string) e2b.Sandbox {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"templateID": template})
	req, _ := http.NewRequest("POST", base+"/v2/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-KEY", e2bKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb e2b.Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	return sb
}

// scriptSteps reads a test script's output: one {"k":step,"v":value}
// JSON line per step.
func scriptSteps(out []byte) map[string]json.RawMessage {
	steps := map[string]json.RawMessage{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l struct {
			K string          `json:"k"`
			V json.RawMessage `json:"v"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			steps[l.K] = l.V
		}
	}
	return steps
}

// TestE2BSDK drives the daemon's E2B API with the official E2B SDK, end
// to end: create with envs and metadata, commands in the foreground and
// the background with output callbacks, envs, cwd, exit codes, a
// command's timeout and kill, files in and out (and refused outside the
// workspace), the filesystem calls (exists, makeDir, rename, list,
// getInfo, remove; a symlink the sandbox planted is never followed),
// info, list by metadata, a second client, kill, a memory breach and a
// wrong key.
func TestE2BSDK(t *testing.T) {
	testE2BSDK(t, "")
}

// TestE2BSDKGVisor is TestE2BSDK with the tools on the gvisor backend:
// the same answers, but for a terminal, which gVisor refuses by name, and
// the chmod gVisor's gofer makes after a file's create, which its watches
// report (docs/isolation.md).
func TestE2BSDKGVisor(t *testing.T) {
	clientsNotRaced(t)
	e2bSDK(t)
	testE2BSDK(t, testutil.Runsc(t))
}

// testE2BSDK runs the SDK's script; with runsc set, on gVisor.
func testE2BSDK(t *testing.T, runsc string) {
	sdk := e2bSDK(t)
	isolatednet.Require(t)
	// A domain for the sandboxes' ports: getHost names them under it.
	_, base := serveE2BDaemonOn(t, "", func(o *Options) { o.Config.Server.E2BDomain = "sandbox.test" }, runsc)
	cmd := exec.Command("node", "testdata/e2b_sdk.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	t.Logf("the SDK said:\n%s", outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"run":          `{"stdout":"hi there\n/tmp\n","stderr":"err\n","exitCode":0}`,
		"callbacks":    `"1\n2\n3\n"`,
		"listed":       `true`,
		"killed":       `true`,
		"read":         `"hello file"`,
		"download":     `"hello file"`,
		"upload":       `[200,"uploaded"]`,
		"gzip":         `6000`,
		"cat":          `"hello file"`,
		"settimeout":   `"ok"`,
		"connect":      `"hello file"`,
		"kill":         `true`,
		"exists":       `[true,false]`,
		"stdin":        `"typed in\nend\n"`,
		"reconnect":    `{"seen":"got one\nlater\n","exitCode":0}`,
		"makedir":      `[true,false,false]`,
		"ls":           `["a.txt:file","sub:dir"]`,
		"stat":         `{"name":"a.txt","type":"file","size":10,"path":"/workspace/dir/a.txt","owner":"sandbox","permissions":"-rw-r--r--"}`,
		"removed":      `false`,
		"killagain":    `false`,
		"watch":        `["create:f.txt","write:f.txt","create:d","create:d/g.txt","write:d/g.txt","rename:f.txt","create:h.txt","remove:h.txt"]`,
		"watchexit":    `["TimeoutError"]`,
		"pages":        `[["b2"],["b1"]]`,
		"ascpages":     `[["b1"],["b2"]]`,
		"filters":      `{"after":["b2"],"sh":["b2","b1"],"small":[],"none":[]}`,
		"connectkeeps": `true`,
		"expired":      `[401,{"code":401,"message":"signature is already expired"}]`,
		"badsig":       `[401,{"code":401,"message":"invalid signature"}]`,
		"metrics":      `{"mem":true,"cpu":true,"cpuCount":1,"disk":true,"when":true}`,
		"pty":          `{"first":true,"size":true,"tty":true,"resized":true,"exit":5}`,
		// envd's EntryInfo (at 0.6.4): the group named as the sandbox
		// names it, the permission bits alone in mode, a protobuf
		// timestamp, and no metadata unless some was set.
		"statmore": `{"group":"sandbox","mode":420,"link":null,"metadata":null,"recent":true}`,
		// X-Metadata-* headers kept as user.e2b.* attributes (lowercased
		// keys), seen in every answer, by the code inside, kept by a
		// rename and replaced by an upload without any, as envd does.
		"metadata": `{"write":{"owner":"ann","team-id":"7"},"info":{"owner":"ann","team-id":"7"},"rename":{"owner":"ann","team-id":"7"},"list":{"owner":"ann","team-id":"7"},"inside":"ann\n","overwritten":null,"after":null}`,
		// A symlink is described by what it resolves to, resolved inside
		// the sandbox ("up" climbs no higher than its root); one that
		// resolves to nothing (missing, a loop, or into /proc, which is
		// never looked into) by its own path and no type, as envd
		// describes one it cannot resolve.
		"links": `{"ln":["file","/workspace/dir/a.txt",420,"Lrwxrwxrwx"],"lndir":["dir","/workspace/dir",493,"Lrwxrwxrwx"],"dangling":[null,"/workspace/dangling",0,"Lrwxrwxrwx"],"lnln":["file","/workspace/dir/a.txt",420,"Lrwxrwxrwx"],"pw":["file","/etc/passwd",420,"Lrwxrwxrwx"],"pr":[null,"/workspace/pr",0,"Lrwxrwxrwx"],"up":["file","/etc/group",420,"Lrwxrwxrwx"],"loop1":[null,"/workspace/loop1",0,"Lrwxrwxrwx"]}`,
		// filepath.WalkDir's order: by name, each directory followed by
		// what is below it.
		"sorted":        `["B","a","b","b/a","b/z","c","c/d"]`,
		"removemissing": `"ok"`,
		// includeEntry: the entry of each create, write and chmod, none
		// for a remove.
		"watchentry": `["create:f.txt:file /workspace/w2/f.txt -rw-r--r--","write:f.txt:file /workspace/w2/f.txt -rw-r--r--","chmod:f.txt:file /workspace/w2/f.txt -rw-------","remove:f.txt:-"]`,
	}
	if runsc != "" {
		// gVisor's gofer sets a file's mode right after creating it: a
		// watch sees a chmod of each new file and directory, with the
		// mode it already had. The rest is as on the other backend.
		for _, k := range []string{"watch", "watchentry"} {
			var evs []string
			if err := json.Unmarshal(steps[k], &evs); err != nil {
				t.Errorf("%s: %s", k, steps[k])
				continue
			}
			var kept []string
			for i, e := range evs {
				kind, rest, _ := strings.Cut(e, ":")
				if i > 0 && kind == "chmod" && strings.TrimPrefix(evs[i-1], "create:") == rest {
					continue
				}
				kept = append(kept, e)
			}
			steps[k], _ = json.Marshal(kept)
		}
	}
	for k, w := range want {
		if string(steps[k]) != w {
			t.Errorf("%s: got %s, want %s", k, steps[k], w)
		}
	}
	type errStep struct {
		Name     string `json:"name"`
		ExitCode *int   `json:"exitCode"`
		Message  string `json:"message"`
		Stdout   string `json:"stdout"`
		Ms       int    `json:"ms"`
	}
	check := func(k, name, msg string, code *int) errStep {
		t.Helper()
		var e errStep
		if err := json.Unmarshal(steps[k], &e); err != nil || e.Name != name || !strings.Contains(e.Message, msg) || (code != nil && (e.ExitCode == nil || *e.ExitCode != *code)) {
			t.Errorf("%s: got %s, want %s with %q in its message", k, steps[k], name, msg)
		}
		return e
	}
	three, minus1 := 3, -1
	if e := check("exit", "CommandExitError", "exit status 3", &three); e.Stdout != "partial\n" {
		t.Errorf("exit: stdout %q", e.Stdout)
	}
	if e := check("timeout", "TimeoutError", "", nil); e.Ms > 10000 {
		t.Errorf("the command's timeout took %d ms", e.Ms)
	}
	check("bgwait", "CommandExitError", "signal: SIGKILL", &minus1)
	check("outsidewrite", "SandboxError", "read-only", nil)
	check("missing", "FileNotFoundError", "no such file", nil)
	check("after", "SandboxNotFoundError", "not running", nil)
	check("killedwait", "TimeoutError", "was not found", nil)
	check("breach", "CommandExitError", "limit exceeded: memory", &minus1)
	check("afterbreach", "SandboxNotFoundError", "not running", nil)
	check("evil", "InvalidArgumentError", "symlink", nil)
	check("evilstat", "InvalidArgumentError", "symlink", nil)
	check("ptyzero", "InvalidArgumentError", "24 rows and 0 cols", nil)
	check("watchevil", "InvalidArgumentError", "symlink", nil)
	check("watchnone", "FileNotFoundError", "no such file", nil)
	check("wrongkey", "AuthenticationError", "API key", nil)
	check("notool", "SandboxError", "no template", nil)
	var info struct {
		ID         string            `json:"id"`
		TemplateID string            `json:"templateId"`
		Metadata   map[string]string `json:"metadata"`
		State      string            `json:"state"`
	}
	var created string
	_ = json.Unmarshal(steps["created"], &created)
	if json.Unmarshal(steps["info"], &info) != nil || info.ID != created || info.TemplateID != "sh" || info.Metadata["team"] != "a" || info.State != "running" {
		t.Errorf("info: %s", steps["info"])
	}
	if string(steps["gethost"]) != `"8000-`+created+`.sandbox.test"` {
		t.Errorf("getHost(8000): %s, want the port under the daemon's domain", steps["gethost"])
	}
	if string(steps["list"]) != `["`+created+`"]` {
		t.Errorf("list by metadata: %s, want [%q]", steps["list"], created)
	}
	// Every watch is stopped (by the SDK, or by the sandbox's end): none
	// holds an inotify instance of this process (the daemon) any longer.
	deadline := time.Now().Add(5 * time.Second)
	for n := inotifyFDs(t); n != 0; n = inotifyFDs(t) {
		if time.Now().After(deadline) {
			t.Errorf("%d inotify instances still open after the SDK's watches ended", n)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inotifyFDs counts this process's inotify instances.
func inotifyFDs(t *testing.T) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + fd.Name()); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestE2BAttacks attacks the E2B API from another key and with forged or
// oversized calls: one key cannot see or end another's sandbox, an envd
// call with another sandbox's access token reaches nothing, and an
// oversized message is refused without running anything.
func TestE2BAttacks(t *testing.T) {
	isolatednet.Require(t)
	base := serveE2B(t, "")
	do := func(method, path, key string, hdr map[string]string, body []byte) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("X-API-KEY", key)
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
	status, b := do("POST", "/v2/sandboxes", e2bKey, nil, []byte(`{"templateID":"sh"}`))
	var sb e2b.Sandbox
	if status != 201 || json.Unmarshal(b, &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("create: %d %s", status, b)
	}
	status, b = do("POST", "/v2/sandboxes", e2bKey, nil, []byte(`{"templateID":"sh"}`))
	var other e2b.Sandbox
	if status != 201 || json.Unmarshal(b, &other) != nil {
		t.Fatalf("create: %d %s", status, b)
	}
	start := func(id, token string, msg []byte) []byte {
		_, b := do("POST", "/process.Process/Start", "", map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": token,
			"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}, msg)
		return b
	}
	echo := e2b.AppendEnvelope(nil, 0, []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo reached"]}}`))
	if b := start(sb.SandboxID, sb.EnvdAccessToken, echo); !bytes.Contains(b, []byte(`"stdout":"cmVhY2hlZAo="`)) {
		t.Fatalf("a command with the sandbox's own token: %q", b)
	}
	for _, tc := range []struct {
		name, id, token string
		msg             []byte
		want            string
	}{
		{"another sandbox's token", sb.SandboxID, other.EnvdAccessToken, echo, `"code":"unavailable"`},
		{"no token", sb.SandboxID, "", echo, `"code":"unavailable"`},
		{"no such sandbox", "s_nosuch", sb.EnvdAccessToken, echo, `"code":"unavailable"`},
		{"oversized message", sb.SandboxID, sb.EnvdAccessToken, append([]byte{0, 0x7f, 0xff, 0xff, 0xff}, make([]byte, 64)...), `"code":"resource_exhausted"`},
		{"cut-short message", sb.SandboxID, sb.EnvdAccessToken, echo[:10], `"code":"invalid_argument"`},
		{"compressed message", sb.SandboxID, sb.EnvdAccessToken, append([]byte{1}, echo[1:]...), `"code":"unimplemented"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := start(tc.id, tc.token, tc.msg)
			if bytes.Contains(b, []byte("cmVhY2hlZAo=")) || !bytes.Contains(b, []byte(tc.want)) {
				t.Fatalf("answered %q, want nothing run and %s", b, tc.want)
			}
		})
	}
	// Files of a sandbox with another's token.
	if status, b := do("GET", "/files?path=/workspace/x", "", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": other.EnvdAccessToken}, nil); status != 502 {
		t.Errorf("a file with another sandbox's token: %d %s", status, b)
	}
	// Signed URLs: bound to the sandbox whose token signed them, the
	// path, the operation and the expiry.
	if status, b := do("POST", "/files?path=/workspace/secret.txt", "", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken, "Content-Type": "application/octet-stream"}, []byte("s3cret")); status != 200 {
		t.Fatalf("write the secret: %d %s", status, b)
	}
	signed := func(p, op, token string, exp int64) string {
		q := url.Values{"path": {p}, "signature": {e2b.Signature(p, op, "", token, exp)}}
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return "/files?" + q.Encode()
	}
	if status, b := do("GET", signed("/workspace/secret.txt", "read", sb.EnvdAccessToken, 0), "", nil, nil); status != 200 || string(b) != "s3cret" {
		t.Fatalf("a signed download: %d %s", status, b)
	}
	for _, c := range []struct{ name, url string }{
		{"another path than signed", strings.Replace(signed("/workspace/other.txt", "read", sb.EnvdAccessToken, 0), "other.txt", "secret.txt", 1)},
		{"signed by another sandbox", signed("/workspace/secret.txt", "read", other.EnvdAccessToken, 0)},
		{"signed for writing", signed("/workspace/secret.txt", "write", sb.EnvdAccessToken, 0)},
		{"expired", signed("/workspace/secret.txt", "read", sb.EnvdAccessToken, time.Now().Unix()-10)},
		{"no signature", "/files?path=/workspace/secret.txt&signature="},
	} {
		if status, b := do("GET", c.url, "", nil, nil); status == 200 || bytes.Contains(b, []byte("s3cret")) {
			t.Errorf("%s: %d %s, want the file refused", c.name, status, b)
		}
	}
	// Another key: the sandbox does not exist for it.
	otherKey := "other-0123456789abcdef"
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + sb.SandboxID}, {"DELETE", "/sandboxes/" + sb.SandboxID},
		{"POST", "/sandboxes/" + sb.SandboxID + "/timeout"}, {"POST", "/v2/sandboxes/" + sb.SandboxID + "/connect"},
	} {
		status, b := do(c.method, c.path, otherKey, nil, []byte(`{"timeout":10}`))
		if status != 404 || !bytes.Contains(b, []byte(`"code":404`)) {
			t.Errorf("%s %s with another key: %d %s, want 404", c.method, c.path, status, b)
		}
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "nextToken=forged", "nextToken=" + base64.RawURLEncoding.EncodeToString([]byte("1."))} {
		if status, b := do("GET", "/v2/sandboxes?"+q, e2bKey, nil, nil); status != 400 {
			t.Errorf("list with %s: %d %s, want 400", q, status, b)
		}
	}
	if status, b := do("GET", "/v2/sandboxes", otherKey, nil, nil); status != 200 || string(bytes.TrimSpace(b)) != "[]" {
		t.Errorf("another key's list: %d %s, want []", status, b)
	}
	// Still there for its own key.
	if status, b := do("GET", "/sandboxes/"+sb.SandboxID, e2bKey, nil, nil); status != 200 {
		t.Errorf("the owner's info after the attacks: %d %s", status, b)
	}
	for _, c := range []struct{ name, body, want string }{
		{"refused option", `{"templateID":"sh","mcp":{"github":{}}}`, "mcp"},
		{"a volume in /home", `{"templateID":"sh","volumeMounts":[{"name":"v","path":"/home/user/data"}]}`, `mount target \"/home/user/data\": /home is built by airlock; choose another place`},
		{"a pause that keeps files only", `{"templateID":"sh","autoPause":true,"autoPauseMemory":false}`, "autoPauseMemory: false"},
		{"resume on traffic without a pause on timeout", `{"templateID":"sh","autoResume":{"enabled":true}}`, "autoResume"},
		{"autoPause not a boolean", `{"templateID":"sh","autoPause":"yes"}`, `\"autoPause\": want true or false`},
		{"wider network", `{"templateID":"sh","network":{"allowOut":["0.0.0.0/0"]}}`, "network.allowOut"},
		{"timeout too long", `{"templateID":"sh","timeout":999999}`, "timeout 999999 s"},
		{"timeout that overflows into range", `{"templateID":"sh","timeout":18446744075}`, "timeout 18446744075 s"},
		{"not JSON", `{"templateID":`, "not valid JSON"},
	} {
		if status, b := do("POST", "/v2/sandboxes", e2bKey, nil, []byte(c.body)); status != 400 || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, status, b, c.want)
		}
	}
}

// TestE2BEgressNarrowing: a sandbox's create may narrow its tool's egress
// as E2B's network options do (denyOut all traffic with allowOut naming
// the exceptions, denyOut all traffic alone, allow_internet_access
// false), never widen it; allowOut alone takes nothing away, as on E2B.
// Two names reach one upstream on loopback; the tool allows both.
func TestE2BEgressNarrowing(t *testing.T) {
	isolatednet.Require(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s\n", strings.Split(r.Host, ":")[0])
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	base := serveE2B(t, fmt.Sprintf(`  net:
    egress:
      - {host: a.test, ports: [%d], addresses: [127.0.0.1], private: true}
      - {host: b.test, ports: [%d], addresses: [127.0.0.1], private: true}
`, port, port))
	create := func(body string) (int, e2b.Sandbox, string) {
		req, _ := http.NewRequest("POST", base+"/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-KEY", e2bKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var sb e2b.Sandbox
		_ = json.Unmarshal(b, &sb)
		return resp.StatusCode, sb, string(b)
	}
	fetchBoth := func(sb e2b.Sandbox) string {
		cmd := fmt.Sprintf(`for h in a.test b.test; do curl -sS --max-time 5 http://$h:%d/ 2>&1 || true; done`, port)
		msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", cmd}}})
		req, _ := http.NewRequest("POST", base+"/process.Process/Start", bytes.NewReader(e2b.AppendEnvelope(nil, 0, msg)))
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/connect+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out strings.Builder
		for {
			_, m, err := e2b.ReadEnvelope(resp.Body, 1<<20)
			if err != nil {
				break
			}
			var ev e2b.StreamEvent
			if json.Unmarshal(m, &ev) == nil && ev.Event.Data != nil {
				out.Write(ev.Event.Data.Stdout)
			}
		}
		return out.String()
	}
	for _, tc := range []struct {
		name, body string
		a, b       bool // reached
	}{
		{"the tool's egress", `{"templateID":"net"}`, true, true},
		{"narrowed to a.test", fmt.Sprintf(`{"templateID":"net","network":{"denyOut":["0.0.0.0/0"],"allowOut":["a.test:%d"]}}`, port), true, false},
		{"allowOut alone", fmt.Sprintf(`{"templateID":"net","network":{"allowOut":["a.test:%d"]}}`, port), true, true},
		{"all traffic denied", `{"templateID":"net","network":{"denyOut":["0.0.0.0/0"]}}`, false, false},
		{"no internet", `{"templateID":"net","allow_internet_access":false}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, sb, body := create(tc.body)
			if status != 201 {
				t.Fatalf("create: %d %s", status, body)
			}
			out := fetchBoth(sb)
			if strings.Contains(out, "hello a.test") != tc.a || strings.Contains(out, "hello b.test") != tc.b {
				t.Fatalf("reached a.test %v, b.test %v; want %v, %v; the sandbox saw:\n%s", strings.Contains(out, "hello a.test"), strings.Contains(out, "hello b.test"), tc.a, tc.b, out)
			}
		})
	}
	for _, tc := range []struct{ name, body, want string }{
		{"a destination the tool does not allow", `{"templateID":"net","network":{"denyOut":["0.0.0.0/0"],"allowOut":["c.test"]}}`, "not within the tool's egress"},
		{"a wider port", `{"templateID":"net","network":{"allowOut":["a.test:1"]}}`, "not within the tool's egress"},
		{"everything", `{"templateID":"net","network":{"allowOut":["0.0.0.0/0"]}}`, "network.allowOut"},
		{"a wider allowOut alone", `{"templateID":"net","network":{"allowOut":["c.test"]}}`, "not within the tool's egress"},
		{"denyOut of one destination", `{"templateID":"net","network":{"denyOut":["b.test"]}}`, "only all traffic (0.0.0.0/0) may be denied"},
		{"public ports", `{"templateID":"net","network":{"allowPublicTraffic":true}}`, "never public"},
		{"other network options", `{"templateID":"net","network":{"egressProxy":{"address":"proxy.test:1080"}}}`, "egressProxy is not supported"},
		{"a rule for a host no service brokers", `{"templateID":"net","network":{"rules":{"a.test":[{"transform":{"headers":{"X-A":"1"}}}]}}}`, "brokers no service at that host"},
	} {
		if status, _, body := create(tc.body); status != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, status, body, tc.want)
		}
	}
}

// TestE2BWatchBounds: directory watches are bounded per sandbox, cannot
// be opened with another sandbox's token, and give their inotify
// instance back when their client goes away.
func TestE2BWatchBounds(t *testing.T) {
	isolatednet.Require(t)
	base := serveE2B(t, "")
	sb, other := e2bCreate(t, base), e2bCreate(t, base)
	// watch opens a watch and returns its first message and the open
	// body.
	watch := func(id, token, path string) (string, io.Closer) {
		t.Helper()
		msg := e2b.AppendEnvelope(nil, 0, []byte(`{"path":"`+path+`","recursive":true}`))
		req, _ := http.NewRequest("POST", base+"/filesystem.Filesystem/WatchDir", bytes.NewReader(msg))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", token)
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, first, err := e2b.ReadEnvelope(resp.Body, e2b.MaxMessage)
		if err != nil {
			resp.Body.Close()
			t.Fatalf("watch %s: %v", path, err)
		}
		return string(first), resp.Body
	}
	var open []io.Closer
	for i := range e2bserver.MaxWatchesPerSandbox {
		first, body := watch(sb.SandboxID, sb.EnvdAccessToken, "/workspace")
		open = append(open, body)
		if first != `{"start":{}}` {
			t.Fatalf("watch %d: first message %s", i, first)
		}
	}
	if first, body := watch(sb.SandboxID, sb.EnvdAccessToken, "/workspace"); !strings.Contains(first, `"code":"resource_exhausted"`) {
		t.Errorf("a watch over the sandbox's bound: %s", first)
	} else {
		body.Close()
	}
	if first, body := watch(sb.SandboxID, other.EnvdAccessToken, "/workspace"); !strings.Contains(first, `"code":"unavailable"`) {
		t.Errorf("a watch with another sandbox's token: %s", first)
	} else {
		body.Close()
	}
	// The other sandbox still has its own.
	first, body := watch(other.SandboxID, other.EnvdAccessToken, "/workspace")
	open = append(open, body)
	if first != `{"start":{}}` {
		t.Errorf("the other sandbox's watch: %s", first)
	}
	if n := inotifyFDs(t); n != e2bserver.MaxWatchesPerSandbox+1 {
		t.Errorf("%d inotify instances open, want %d", n, e2bserver.MaxWatchesPerSandbox+1)
	}
	for _, b := range open {
		b.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := inotifyFDs(t); n != 0; n = inotifyFDs(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances still open after their clients went away", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And the bound is free again (the handlers return just after).
	for {
		first, body = watch(sb.SandboxID, sb.EnvdAccessToken, "/workspace")
		body.Close()
		if first == `{"start":{}}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a watch after the others ended: %s", first)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2BAgentFramework runs an agent of the OpenAI Agents SDK through
// its own E2B integration (@openai/agents-extensions' E2BSandboxClient,
// as installed from npm by scripts/test) against the daemon: the
// framework creates the sandbox, its exec_command tool runs in it, and
// the agent's answer carries what the command printed there. Only the
// model is scripted (testdata/e2b_agents.mjs).
func TestE2BAgentFramework(t *testing.T) {
	mods := os.Getenv("AIRLOCK_TEST_AGENTS_MODULES")
	if mods == "" {
		t.Skip("AIRLOCK_TEST_AGENTS_MODULES is not set (scripts/test installs the OpenAI Agents SDK)")
	}
	if _, err := os.Stat(filepath.Join(mods, "@openai", "agents-extensions")); err != nil {
		t.Fatalf("AIRLOCK_TEST_AGENTS_MODULES is set, but the SDK is not there: %v", err)
	}
	isolatednet.Require(t)
	base := serveE2B(t, "")
	// ES modules resolve packages from the script's directory: the
	// script goes beside a link to the modules.
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/e2b_agents.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(dir, "agent.mjs"))
	cmd.Env = append(os.Environ(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey,
		"AGENT_TEMPLATE=sh", `AGENT_CMD=echo "answer $((6*7)) from $(cat /proc/1/comm) as uid $(id -u)"`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	t.Logf("the agent said:\n%s", outb)
	if err != nil {
		t.Fatalf("the agent's script: %v\n%s", err, stderr.String())
	}
	steps := scriptSteps(outb)
	var final string
	_ = json.Unmarshal(steps["final"], &final)
	if !strings.Contains(final, "answer 42 from ") {
		t.Errorf("the agent's answer %q lacks the command's output", final)
	}
	if !strings.Contains(string(steps["tools"]), `"exec_command"`) {
		t.Errorf("the model was offered %s, want exec_command among them", steps["tools"])
	}
	// The framework ended its sandbox when the run was over.
	req, _ := http.NewRequest("GET", base+"/v2/sandboxes", nil)
	req.Header.Set("X-API-KEY", e2bKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(bytes.TrimSpace(b)) != "[]" {
		t.Errorf("sandboxes left after the run: %s", b)
	}
}
