package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/e2b"
)

// TestMCPRefusalsReadable runs clients an agent's tool would run (curl,
// pip, git) in a sandbox whose tool may reach nothing, through an MCP
// tools/call, and checks what the agent reads: each client's own output
// (curl over HTTP prints airlock's answer itself; over HTTPS, curl and
// git print only "403", and pip that it found no version of the
// package), then, after it, one plain sentence per
// distinct refusal (a lookup a client made past the proxy among them),
// naming what was refused, the rule's reason, and that
// the operator's config decides (issue 40).
func TestMCPRefusalsReadable(t *testing.T) {
	// pip and git's HTTPS helper, as the sandbox will find them (it sees
	// the host's /usr): a minimal host (the test guest) may lack them,
	// and then only curl is asked.
	// pip needs its roots to try an index at all (the guest has none).
	pipOK := strings.Contains(output("/usr/bin/python3", "-m", "pip", "download", "--no-index", "--no-deps", "-d", t.TempDir(), "no-such-package-x"), "Could not find a version") &&
		output("/usr/bin/python3", "-c", "import pip._vendor.certifi as c; open(c.where()).close(); print('roots')") == "roots\n"
	gitOK := false
	if dir := strings.TrimSpace(output("git", "--exec-path")); dir != "" {
		_, err := os.Stat(filepath.Join(dir, "git-remote-https"))
		gitOK = err == nil
	}
	if (!pipOK || !gitOK) && os.Getenv("CI") != "" {
		t.Fatalf("CI lacks pip (%v) or git's HTTPS helper (%v)", pipOK, gitOK)
	}
	_, sock := serveConfig(t, `
tools:
  fetch:
    description: fetches what the task needs
    command:
      - sh
      - -c
      - |
        echo "http: $(curl -sS http://example.org/ 2>&1)"
        echo "https: $(curl -sS https://pypi.org/simple/ 2>&1)"
        echo "verbose: $(curl -sv https://pypi.org/simple/ 2>&1 | grep '^< HTTP')"
        echo "direct: $(curl -sS --noproxy '*' http://evil.test/ 2>&1)"
        echo "pip: $(python3 -m pip download --no-deps --no-cache-dir --retries 0 --timeout 5 -d /tmp/p requests 2>&1 | head -1)"
        echo "git: $(git clone -q https://github.com/octo/hello /tmp/h 2>&1)"
        true
    env: {HOME: /tmp, GIT_TERMINAL_PROMPT: "0"}
`, nil)
	cs := mcpConnect(t, sock, nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	text := resultText(res)
	wants := []string{
		// The clients' own words.
		"http: airlock refused a connection to example.org:80 (",
		"https: curl: (56) CONNECT tunnel failed, response 403",
		// curl -v (and pip's retries) show the refused tunnel's
		// status line.
		"verbose: < HTTP/1.1 403 Refused by airlock policy, not a network fault (only the operator's airlock config can allow it)",
		// A client that ignores the proxy finds no such name: the
		// list below says why.
		"direct: curl: (6) Could not resolve host: evil.test",
		// What airlock adds for the agent: every refusal once.
		"airlock refused:\n",
		"- airlock refused a connection to pypi.org:443 (\"pypi.org\" is not an allowed destination); this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it.\n",
		"- airlock refused a connection to example.org:80 (",
		"- airlock refused the lookup of evil.test (\"evil.test\" is not an allowed destination); this is airlock's policy, not a network fault",
	}
	if pipOK {
		// pip says only that it found no version: a model would
		// think the package does not exist.
		wants = append(wants, "pip: ERROR: Could not find a version that satisfies the requirement requests")
	}
	if gitOK {
		wants = append(wants, "git: fatal: unable to access 'https://github.com/octo/hello/': CONNECT tunnel failed, response 403",
			"- airlock refused a connection to github.com:443 (")
	}
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("the tool result lacks %q", want)
		}
	}
	if n := strings.Count(text, "- airlock refused a connection to pypi.org:443"); n != 1 {
		t.Errorf("the refusal of pypi.org is listed %d times, want once", n)
	}
	if t.Failed() {
		t.Logf("the tool result:\n%s", text)
	}
}

// output is what a command on the host prints (stdout and stderr), or
// "" when it cannot start.
func output(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

// TestE2BRefusalsReadable: an E2B client reads a command's output and
// nothing else of its run, so the command's stderr ends with the run's
// refusals, each once, after what the command itself wrote; its stdout
// is the command's alone.
func TestE2BRefusalsReadable(t *testing.T) {
	base := serveE2B(t, "")
	sb := e2bCreate(t, base)
	stdout, stderr := e2bRunStreams(t, base, sb, `echo out; curl -sS https://pypi.org/simple/; curl -sS https://pypi.org/simple/; curl -sS --noproxy '*' http://evil.test/; echo done >&2`)
	if stdout != "out\n" {
		t.Errorf("stdout %q, want the command's own", stdout)
	}
	want := "curl: (56) CONNECT tunnel failed, response 403\n" +
		"curl: (56) CONNECT tunnel failed, response 403\n" +
		"curl: (6) Could not resolve host: evil.test\n" +
		"done\n" +
		"airlock refused:\n" +
		"- airlock refused a connection to pypi.org:443 (\"pypi.org\" is not an allowed destination); this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it.\n" +
		"- airlock refused the lookup of evil.test (\"evil.test\" is not an allowed destination); this is airlock's policy, not a network fault: retrying or another route is refused the same way, and only the operator's airlock config can allow it.\n"
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
}

// e2bRunStreams runs cmd (sh -c) through envd's Start and returns its
// stdout and stderr once it ends.
func e2bRunStreams(t *testing.T, base string, sb e2b.Sandbox, cmd string) (string, string) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", cmd}}})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/process.Process/Start", bytes.NewReader(e2b.AppendEnvelope(nil, 0, msg)))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out, errs strings.Builder
	for {
		_, m, err := e2b.ReadEnvelope(resp.Body, 1<<20)
		if err != nil {
			break
		}
		var ev e2b.StreamEvent
		if json.Unmarshal(m, &ev) == nil && ev.Event.Data != nil {
			out.Write(ev.Event.Data.Stdout)
			errs.Write(ev.Event.Data.Stderr)
		}
	}
	return out.String(), errs.String()
}
