package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

// TestE2BTemplateBuildJS builds a template with E2B's JavaScript
// Template SDK (testdata/e2b_template.mjs) on a daemon whose builds may
// reach one mirror on loopback: the build copies the context's files,
// fetches from the mirror and is run by Sandbox.create; built again it
// comes from the cache with nothing uploaded; a RUN reaching an unnamed
// host or breaching the memory ceiling fails saying so; another key
// neither sees nor uses the template, and a key without builds: true
// may not build.
func TestE2BTemplateBuildJS(t *testing.T) {
	sdk := e2bSDK(t)
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
	addr := freePort(t)
	serveConfig(t, fmt.Sprintf(`
server:
  e2b: %s
  tokens:
    - {name: agent, secret: key, tools: ["*"], builds: true}
    - {name: other, secret: other, tools: ["*"]}
secrets:
  key: {env: TEST_E2B_KEY}
  other: {env: TEST_OTHER_KEY}
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
	base := "http://" + addr

	dir := t.TempDir()
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
	cmd := exec.Command("node", "testdata/e2b_template.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey,
		"OTHER_KEY=other-0123456789abcdef", "CONTEXT="+dir, fmt.Sprintf("MIRROR=mirror.test:%d", port))
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
