package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// busyboxBase imports a base image of Debian's static busybox (which
// scripts/test installs) into st as busybox-base.
func busyboxBase(t *testing.T, st *image.Store) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("/bin/busybox (busybox-static) is missing in CI: %v", err)
		}
		t.Skipf("needs /bin/busybox (Debian's busybox-static): %v", err)
	}
	layer := imagetest.Tar(t,
		imagetest.Dir("bin/"), imagetest.Entry{Name: "bin/busybox", Data: string(bb), Mode: 0o755},
		imagetest.Entry{Name: "bin/sh", Typ: tar.TypeSymlink, Link: "busybox"},
		// The SDKs run commands with /bin/bash -l -c: busybox's shell
		// stands in.
		imagetest.Entry{Name: "bin/bash", Data: "#!/bin/sh\nexec /bin/sh \"$@\"\n", Mode: 0o755},
		imagetest.Dir("etc/"), imagetest.Entry{Name: "etc/passwd", Data: "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"},
		imagetest.Entry{Name: "etc/group", Data: "root:x:0:\nuser:x:1000:\n"},
		imagetest.Dir("tmp/"), imagetest.Dir("home/"), imagetest.Dir("home/user/"),
	)
	if _, err := st.ImportReader(context.Background(), bytes.NewReader(layer), image.ImportOptions{Name: "busybox-base"}); err != nil {
		t.Fatal(err)
	}
}

// buildsDaemon serves a daemon whose key agent (e2bKey) may build
// templates of tool sh, from busybox-base, reaching a mirror on
// loopback (mirror.test:PORT) and nothing else; other may not build,
// third may. It returns the E2B API's URL, the mirror's host:port and a
// build context (hello.sh, data/a.txt, data/sub/b.txt).
func buildsDaemon(t *testing.T) (base, mirrorAddr, dir string) {
	t.Helper()
	isolatednet.Require(t)
	st := testImageStore(t)
	busyboxBase(t, st)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mirror := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "from the mirror: "+r.URL.Path+"\n")
	})}
	go mirror.Serve(ln)
	t.Cleanup(func() { mirror.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	t.Setenv("TEST_E2B_KEY", e2bKey)
	t.Setenv("TEST_OTHER_KEY", "other-0123456789abcdef")
	t.Setenv("TEST_THIRD_KEY", "third-0123456789abcdef")
	addr := freePort(t)
	serveConfig(t, fmt.Sprintf(`
server:
  e2b: %s
  tokens:
    - {name: agent, secret: key, tools: ["*"], builds: true}
    - {name: other, secret: other, tools: ["*"]}
    - {name: third, secret: third, tools: [sh], builds: true}
secrets:
  key: {env: TEST_E2B_KEY}
  other: {env: TEST_OTHER_KEY}
  third: {env: TEST_THIRD_KEY}
images:
  store: %s
builds:
  tool: sh
  allow:
    - {host: mirror.test, ports: [%d], addresses: [127.0.0.1], private: true}
  limits: {memory: 96MiB, time: 60s}
tools:
  sh: {}
`, addr, st.Dir(), port), nil)

	dir = t.TempDir()
	for p, data := range map[string]string{
		"hello.sh":       "#!/bin/sh\necho \"$GREETING from $(pwd) as $(id -u)\"\n",
		"data/a.txt":     "a\n",
		"data/sub/b.txt": "b\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "http://" + addr, fmt.Sprintf("mirror.test:%d", port), dir
}

// TestE2BTemplateBuildJS builds a template with E2B's JavaScript
// Template SDK (testdata/e2b_template.mjs) on a daemon whose builds may
// reach one mirror on loopback: the build copies the context's files,
// fetches from the mirror and is run by Sandbox.create; built again it
// comes from the cache with nothing uploaded; a RUN reaching an unnamed
// host or breaching the memory ceiling fails saying so; another key
// neither sees nor uses the template, a key without builds: true may
// not build, and a third key building the same template uploads its
// files again and takes nothing from the first key's cache.
func TestE2BTemplateBuildJS(t *testing.T) {
	sdk := e2bSDK(t)
	base, mirror, dir := buildsDaemon(t)
	cmd := exec.Command("node", "testdata/e2b_template.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey,
		"OTHER_KEY=other-0123456789abcdef", "THIRD_KEY=third-0123456789abcdef", "CONTEXT="+dir, "MIRROR="+mirror)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"built":       `["my-tool","string",true]`,
		"exists":      `[true,false]`,
		"files":       `["from the mirror: /pool/tool.deb\na\nb\n","/opt/app\n"]`,
		"byid":        `"a\n"`,
		"again":       `[true,4,true]`,
		"otherexists": `false`,
		"thirdbuild":  `[true,0,2,true]`,
		"deleted":     `[false,true,false]`,
		"tags":        `[["v2","stable"],["default","stable","v2"]]`,
		"bytag":       `"b\n"`,
		"dockerfile":  `"made by dockerfile\n1000\n/home/user\n"`,
		"tagsafter":   `["default","v2"]`,
	}
	for k, v := range want {
		if got := string(steps[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	contains := map[string][]string{
		"hello":       {"hi from /opt/app as "},
		"denied":      {"false", "exit code", "true]"},
		"memory":      {"false", "step 1 (RUN head", "breached its memory limit"},
		"nobase":      {"false", "no-such-image", "import or pull it first"},
		"othercreate": {`no template \"my-tool\"`},
		"otherbuild":  {"false", "may not build templates"},
		"afterdelete": {`no template \"my-tool\"`},
	}
	for k, subs := range contains {
		for _, s := range subs {
			if got := string(steps[k]); !strings.Contains(got, s) {
				t.Errorf("%s: got %s, want it to contain %q", k, got, s)
			}
		}
	}
	if t.Failed() {
		t.Logf("the SDK said:\n%s\n%s", outb, stderr.String())
	}
}

// TestE2BTemplateBuildAttacks tries, on the wire, what a hostile key may
// send a build: uploads whose entries leave the context (.., a symlink
// out, a device node), a gzip bomb, a COPY of ../ or through a symlink,
// an upload link used twice or over the ceiling, another key's build,
// and malformed steps. Each fails saying why, and nothing lands outside
// the build.
func TestE2BTemplateBuildAttacks(t *testing.T) {
	isolatednet.Require(t)
	st := testImageStore(t)
	busyboxBase(t, st)
	t.Setenv("TEST_E2B_KEY", e2bKey)
	t.Setenv("TEST_OTHER_KEY", "other-0123456789abcdef")
	addr := freePort(t)
	serveConfig(t, fmt.Sprintf(`
server:
  e2b: %s
  tokens:
    - {name: agent, secret: key, tools: ["*"], builds: true}
    - {name: other, secret: other, tools: ["*"], builds: true}
secrets:
  key: {env: TEST_E2B_KEY}
  other: {env: TEST_OTHER_KEY}
images:
  store: %s
builds:
  tool: sh
  limits: {memory: 64MiB, disk: 32MiB, time: 30s}
  upload_max: 1MiB
tools:
  sh: {}
`, addr, st.Dir()), nil)
	base := "http://" + addr
	const otherKey = "other-0123456789abcdef"
	do := func(method, url, key, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	request := func(name string) (tid, bid string) {
		t.Helper()
		status, b := do("POST", base+"/v3/templates", e2bKey, `{"name":"`+name+`"}`)
		var r struct{ TemplateID, BuildID string }
		if status != 202 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("request: %d %s", status, b)
		}
		return r.TemplateID, r.BuildID
	}
	upload := func(tid string, archive []byte) string {
		t.Helper()
		sum := sha256.Sum256(archive)
		hash := hex.EncodeToString(sum[:])
		status, b := do("GET", base+"/templates/"+tid+"/files/"+hash, e2bKey, "")
		var link struct {
			Present bool
			URL     string
		}
		if status != 201 || json.Unmarshal(b, &link) != nil {
			t.Fatalf("file link: %d %s", status, b)
		}
		if !link.Present {
			if status, b := do("PUT", link.URL, "", string(archive)); status != 200 {
				t.Fatalf("upload: %d %s", status, b)
			}
			if status, b := do("PUT", link.URL, "", string(archive)); status != 404 {
				t.Errorf("an upload link used twice: %d %s, want 404", status, b)
			}
		}
		return hash
	}
	// build runs steps and waits for the build's end: its status and
	// reason.
	build := func(name, steps string, files []byte) (string, string) {
		t.Helper()
		tid, bid := request(name)
		if files != nil {
			steps = strings.ReplaceAll(steps, "HASH", upload(tid, files))
		}
		if status, b := do("POST", base+"/v2/templates/"+tid+"/builds/"+bid, e2bKey, `{"fromImage":"busybox-base","steps":`+steps+`}`); status != 202 {
			t.Fatalf("start: %d %s", status, b)
		}
		if status, b := do("GET", base+"/templates/"+tid+"/builds/"+bid+"/status", otherKey, ""); status != 404 {
			t.Errorf("another key's build status: %d %s, want 404", status, b)
		}
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			status, b := do("GET", base+"/templates/"+tid+"/builds/"+bid+"/status", e2bKey, "")
			var s struct {
				Status string
				Reason struct{ Message string }
			}
			if status != 200 || json.Unmarshal(b, &s) != nil {
				t.Fatalf("status: %d %s", status, b)
			}
			if s.Status == "ready" || s.Status == "error" {
				return s.Status, s.Reason.Message
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("the build did not end in a minute")
		return "", ""
	}
	tarOf := func(entries ...imagetest.Entry) []byte { return imagetest.Tar(t, entries...) }
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 256 << 20, Mode: 0o644})
	zero := make([]byte, 1<<20)
	for i := 0; i < 256; i++ {
		if _, err := tw.Write(zero); err != nil {
			break
		}
	}
	tw.Close()
	zw.Close()
	if bomb.Len() > 1<<20 {
		t.Fatalf("the bomb is %d bytes, over the upload ceiling", bomb.Len())
	}
	outside := filepath.Join(t.TempDir(), "escaped")
	copyStep := func(src string) string {
		return `[{"type":"COPY","args":["` + src + `","/x"],"filesHash":"HASH"}]`
	}
	for _, tt := range []struct {
		name, steps string
		files       []byte
		says        string
	}{
		{"dotdot entry", copyStep("a"), tarOf(imagetest.Entry{Name: "../../../../" + outside, Data: "x"}), "unsafe"},
		{"absolute entry", copyStep("a"), tarOf(imagetest.Entry{Name: outside, Data: "x"}), "unsafe"},
		{"symlink out", copyStep("link/passwd"), tarOf(imagetest.Entry{Name: "link", Typ: tar.TypeSymlink, Link: "/etc"}), "is a symlink"},
		{"copy dotdot", copyStep("../etc/passwd"), tarOf(imagetest.Entry{Name: "a", Data: "x"}), "outside the build's context"},
		{"gzip bomb", copyStep("big"), bomb.Bytes(), "exceeds a limit"},
		{"device node", copyStep("dev"), tarOf(imagetest.Entry{Name: "dev", Typ: tar.TypeChar}), "not in the build's context"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, reason := build(strings.ReplaceAll(tt.name, " ", "-"), tt.steps, tt.files)
			if status != "error" || !strings.Contains(reason, tt.says) {
				t.Errorf("got %s %q, want an error saying %q", status, reason, tt.says)
			}
			if _, err := os.Lstat(outside); err == nil {
				t.Fatalf("the upload wrote %s, outside the build", outside)
			}
		})
	}

	tid, bid := request("refused")
	big := make([]byte, 1<<20+1)
	sum := sha256.Sum256(big)
	_, b := do("GET", base+"/templates/"+tid+"/files/"+hex.EncodeToString(sum[:]), e2bKey, "")
	var link struct{ URL string }
	json.Unmarshal(b, &link)
	if status, b := do("PUT", link.URL, "", string(big)); status != 413 && status != 400 {
		t.Errorf("an upload over upload_max: %d %s", status, b)
	}
	for _, tt := range []struct {
		name, method, path, key, body string
		status                        int
		says                          string
	}{
		{"unknown step", "POST", "/v2/templates/" + tid + "/builds/" + bid, e2bKey, `{"fromImage":"busybox-base","steps":[{"type":"ADD","args":["x","y"]}]}`, 400, "airlock builds RUN, COPY, ENV, WORKDIR and USER steps"},
		{"start command", "POST", "/v2/templates/" + tid + "/builds/" + bid, e2bKey, `{"fromImage":"busybox-base","startCmd":"sleep 1"}`, 400, "starts no process"},
		{"registry", "POST", "/v2/templates/" + tid + "/builds/" + bid, e2bKey, `{"fromImage":"x","fromImageRegistry":{"type":"registry","username":"u","password":"p"}}`, 400, "fromImageRegistry"},
		{"two bases", "POST", "/v2/templates/" + tid + "/builds/" + bid, e2bKey, `{"fromImage":"busybox-base","fromTemplate":"x"}`, 400, "exactly one of fromImage and fromTemplate"},
		{"bad hash", "GET", "/templates/" + tid + "/files/xyz", e2bKey, ``, 400, "64 lower-case hex"},
		{"another key's template", "GET", "/templates/" + tid + "/files/" + hex.EncodeToString(sum[:]), otherKey, ``, 404, "no template"},
		{"another key's build", "POST", "/v2/templates/" + tid + "/builds/" + bid, otherKey, `{"fromImage":"busybox-base"}`, 404, "no build"},
		{"a tool's name", "POST", "/v3/templates", e2bKey, `{"name":"sh"}`, 400, "is a tool's"},
		{"a bad name", "POST", "/v3/templates", e2bKey, `{"name":"Bad Name"}`, 400, "want NAME or NAME:TAG"},
		{"sizes", "POST", "/v3/templates", e2bKey, `{"name":"x","memoryMB":1024}`, 400, "limits of tool sh"},
		{"no key", "POST", "/v3/templates", "", `{"name":"x"}`, 401, ""},
		{"another key's tags", "POST", "/templates/tags", otherKey, `{"target":"refused","tags":["x"]}`, 404, `no template \"refused\"`},
		{"another key's tag list", "GET", "/templates/" + tid + "/tags", otherKey, ``, 404, "no template"},
		{"tags of no build", "POST", "/templates/tags", e2bKey, `{"target":"refused","tags":["x"]}`, 404, `no build tagged \"default\"`},
		{"a bad tag", "POST", "/templates/tags", e2bKey, `{"target":"refused","tags":["A B"]}`, 400, "want 1-64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := do(tt.method, base+tt.path, tt.key, tt.body)
			if status != tt.status || !strings.Contains(string(b), tt.says) {
				t.Errorf("got %d %s, want %d saying %q", status, b, tt.status, tt.says)
			}
		})
	}
}

// TestE2BTemplateBuildPython builds a template with E2B's Python
// Template SDK, its sync and its async client (testdata/pytemplate,
// pytest), on buildsDaemon's daemon, and creates a sandbox of it.
func TestE2BTemplateBuildPython(t *testing.T) {
	clientsNotRaced(t)
	py := e2bPython(t)
	base, mirror, dir := buildsDaemon(t)
	cmd := exec.CommandContext(t.Context(), py, "-m", "pytest", "-q", "-rxXs", "-p", "no:cacheprovider", "testdata/pytemplate")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "AIRLOCK_TEST_CONTEXT="+dir, "AIRLOCK_TEST_MIRROR="+mirror)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Logf("pytest:\n%s", out)
}
