package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/interp"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// needKernel skips a test of the code interpreter on a host whose
// Python has no ipykernel: the sandboxes of a host-image tool run the
// host's. The test script installs it, so CI never skips.
func needKernel(t *testing.T) {
	t.Helper()
	if err := exec.Command(interp.Python, "-c", "import ipykernel").Run(); err != nil {
		t.Skipf("%s has no ipykernel (apt-get install python3-ipykernel): %v", interp.Python, err)
	}
}

// hostOnly skips a test of the code interpreter's behaviour in the
// cgroup-v2 guest: what it tests is no cgroup's (contexts, ceilings the
// host applies per execution, kernels started ahead, the files API), the
// guest runs TestInterpreter for the kernel in a v2 sandbox, and each
// kernel's start costs the emulated guest seconds.
func hostOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("AIRLOCK_TEST_VM") != "" {
		t.Skip("the host's run covers this; the guest runs TestInterpreter")
	}
}

// clientsNotRaced skips a test whose point is a real client's view (an
// SDK's whole script) under -short, the race detector's run: the plain
// run drives the same server paths with it, and the other tests race
// them.
func clientsNotRaced(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a real client's whole run; the plain run covers it, -short skips it")
	}
}

// execute sends runCode's request (as the E2B SDKs do: the sandbox's id,
// port 49999 and its access token in headers) and returns the answer's
// lines.
func execute(t *testing.T, base string, sb e2b.Sandbox, body string) (int, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/execute", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, []map[string]any{{"body": string(b)}}
	}
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a line that is not JSON: %q", sc.Text())
		}
		lines = append(lines, m)
	}
	return 200, lines
}

// lineKinds is the lines' types, with the text of output and results.
func lineKinds(lines []map[string]any) string {
	var out []string
	for _, l := range lines {
		s, _ := l["type"].(string)
		switch s {
		case "stdout", "stderr", "result":
			if l["timestamp"] == nil && s != "result" {
				s += "(no timestamp)"
			}
			s += "=" + strings.TrimSpace(str(l["text"]))
		case "error":
			s += "=" + str(l["name"])
		case "number_of_executions":
			s += "=" + jsonText(l["execution_count"])
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func str(v any) string { s, _ := v.(string); return s }

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestInterpreter: E2B's runCode (POST /execute on port 49999) runs in a
// real IPython kernel inside the sandbox, as the sandbox's user: the
// answer's lines in E2B's order, state kept between calls, an error by
// name, per-call env that does not last, and what the default context
// cannot serve refused by name. Another key's sandbox, or a wrong access
// token, finds nothing.
func TestInterpreter(t *testing.T) {
	needKernel(t)
	d, base := serveE2BDaemon(t, "", nil)
	sb := e2bCreate(t, base)
	for _, tt := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"code":"x = 21\nimport os\nprint(os.getuid())"}`, 200, "number_of_executions=1 stdout=1000 end_of_execution"},
		{`{"code":"x * 2","context_id":null,"language":null,"env_vars":null}`, 200, "number_of_executions=2 result=42 end_of_execution"},
		{`{"code":"display('shown'); 1/0"}`, 200, "number_of_executions=3 result='shown' error=ZeroDivisionError end_of_execution"},
		{`{"code":"os.environ['ONCE']","env_vars":{"ONCE":"yes"}}`, 200, "number_of_executions=4 result='yes' end_of_execution"},
		{`{"code":"'ONCE' in os.environ"}`, 200, "number_of_executions=5 result=False end_of_execution"},
		{`{"code":"1","language":"js"}`, 400, ""},
		{`{"code":"1","context_id":"c1","language":"python"}`, 400, ""},
		{`{"code":"1","context_id":"c1"}`, 404, ""},
	} {
		status, lines := execute(t, base, sb, tt.body)
		if status != tt.status || (tt.want != "" && lineKinds(lines) != tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.body, status, lineKinds(lines), tt.status, tt.want)
		}
	}
	// Each execution is in the audit log, the code and how it ended;
	// the refused requests ran nothing.
	if err := d.Audit().Append(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Audit().Query(t.Context(), audit.Query{Kind: audit.KindCode, Session: sb.SandboxID})
	if err != nil || len(evs) != 5 {
		t.Fatalf("session.code events: %d %v, want the 5 executions", len(evs), err)
	}
	var third struct {
		Code  string `json:"code"`
		Count int    `json:"execution_count"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(evs[2].Detail, &third); err != nil || third.Count != 3 || third.Error != "ZeroDivisionError" || !strings.Contains(third.Code, "1/0") {
		t.Errorf("the third execution's record: %s %v", evs[2].Detail, err)
	}
	// A refused request's refusal follows the code's own output, in its
	// stderr (an agent reads an execution's logs).
	_, lines := execute(t, base, sb, `{"code":"import urllib.request\ntry:\n    urllib.request.urlopen('https://pypi.org/simple/', timeout=10)\nexcept Exception as e:\n    print(type(e).__name__)"}`)
	var refused bool
	for i, l := range lines {
		if l["type"] == "stderr" && strings.HasPrefix(str(l["text"]), "airlock refused:\n- airlock refused a connection to pypi.org:443 (") {
			refused = i == len(lines)-2 && lines[i-1]["type"] == "stdout" && strings.TrimSpace(str(lines[i-1]["text"])) == "URLError"
		}
	}
	if !refused {
		t.Errorf("a refused request: %s, want its output, then the refusal in stderr, last", lineKinds(lines))
	}
	// A wrong token finds no sandbox.
	wrong := sb
	wrong.EnvdAccessToken = "not-its-token"
	if status, _ := execute(t, base, wrong, `{"code":"1"}`); status != 502 {
		t.Errorf("a wrong access token: %d, want 502 (E2B's proxy's answer for a sandbox it does not find)", status)
	}
}

// TestInterpreterInterrupted: an execution whose client goes away is
// interrupted; the context, its state kept, runs the next one.
func TestInterpreterInterrupted(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	base := serveE2B(t, "")
	sb := e2bCreate(t, base)
	if _, lines := execute(t, base, sb, `{"code":"kept = 7"}`); lineKinds(lines) != "number_of_executions=1 end_of_execution" {
		t.Fatalf("first: %s", lineKinds(lines))
	}
	req, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":"import time\nwhile True: time.sleep(0.05)"}`))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	client := &http.Client{Timeout: time.Second}
	if resp, err := client.Do(req); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatal("an endless execution ended")
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, lines := execute(t, base, sb, `{"code":"kept * 6"}`)
		if strings.Contains(lineKinds(lines), "result=42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the context after its client went away: %s", lineKinds(lines))
		}
	}
}

// e2bInterpreterSDK is the official @e2b/code-interpreter SDK's entry
// point, which scripts/test installs pinned (2.8.0) beside e2b's.
func e2bInterpreterSDK(t *testing.T) string {
	t.Helper()
	e2bSDK(t) // the same directory, and node
	p := filepath.Join(os.Getenv("AIRLOCK_TEST_E2B_MODULES"), "@e2b", "code-interpreter", "dist", "index.mjs")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("AIRLOCK_TEST_E2B_MODULES is set, but @e2b/code-interpreter is not there: %v", err)
	}
	return p
}

// TestInterpreterSDK drives the code interpreter with the official
// @e2b/code-interpreter SDK, unchanged, as a code-running agent would:
// its default template, print and the main result, state across calls,
// output callbacks with timestamps, an exception's name, value and
// traceback, a display, per-call env that does not last, a language
// airlock does not serve, a timeout that interrupts (the context then
// still usable), contexts (one with its own directory and state, bash by
// language, the list, restart, remove), a figure as PNG, a DataFrame, the
// sandbox gone after its kill, and a kernel that breaches the sandbox's
// memory named (and its sandbox gone).
func TestInterpreterSDK(t *testing.T) {
	needKernel(t)
	clientsNotRaced(t)
	sdk := e2bInterpreterSDK(t)
	isolatednet.Require(t)
	runInterpreterSDK(t, sdk, serveE2B(t, "  code-interpreter-v1: {}\n"))
}

// runInterpreterSDK runs testdata/e2b_interpreter.mjs with the SDK at sdk
// against the E2B API at base, whose tool code-interpreter-v1 the SDK's
// sandboxes are, and checks what it says.
func runInterpreterSDK(t *testing.T, sdk, base string) {
	t.Helper()
	cmd := exec.Command("node", "testdata/e2b_interpreter.mjs")
	cmd.Env = append(os.Environ(), "E2B_CI_SDK="+sdk, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	t.Logf("the SDK said:\n%s", outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	want := map[string]string{
		"created":      `true`,
		"print":        `{"stdout":["hi\n"],"results":0,"count":1}`,
		"main":         `{"text":"42","main":true,"error":null}`,
		"callbacks":    `[["stdout","out\n","number"],["stderr","err\n","number"]]`,
		"error":        `{"name":"ZeroDivisionError","value":"division by zero","traceback":true,"results":["'shown'"]}`,
		"env":          `"'yes'"`,
		"envgone":      `"False"`,
		"timeout":      `"TimeoutError"`,
		"context":      `{"language":"python","cwd":"/tmp"}`,
		"incontext":    `"('/tmp', False)"`,
		"bash":         `{"stdout":["42\n"],"error":null}`,
		"bashstate":    `{"stdout":["6\n"],"error":"ExitCode"}`,
		"list":         `[["python",false],["python",true],["bash",false]]`,
		"restarted":    `"NameError"`,
		"removed":      `["NotFoundError",true]`,
		"png":          `[[true,"iVBORw0K"]]`,
		"dataframe":    `{"data":{"a":[1,2],"b":["x","y"]},"html":true}`,
		"memory":       `{"name":"LimitExceeded","memory":true}`,
		"aftermemory":  `"TimeoutError"`,
		"aftertimeout": `"21"`,
		"afterkill":    `"TimeoutError"`,
	}
	for k, w := range want {
		if string(steps[k]) != w {
			t.Errorf("%s: got %s, want %s", k, steps[k], w)
		}
	}
	// The SDK says only the status of a 400 (the answer's text, which
	// names the language, is checked in TestInterpreter).
	var lang struct{ Name, Message string }
	if err := json.Unmarshal(steps["language"], &lang); err != nil || lang.Name != "SandboxError" || !strings.HasPrefix(lang.Message, "400") {
		t.Errorf("a language airlock does not serve: %s", steps["language"])
	}
}

// TestInterpreterHostileKernel: code that forges the kernel's protocol
// (it can reach the bridge's descriptors from inside) breaks only its own
// kernel: the execution ends with a KernelError, the host and the sandbox
// go on, and the next execution gets a fresh kernel. Code that floods its
// output meets the sandbox's output ceiling: the sandbox is destroyed,
// the execution ends with the limit by name, and later calls find
// nothing.
func TestInterpreterHostileKernel(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	base := serveE2B(t, "")
	sb := e2bCreate(t, base)
	forge := func(line string) string {
		return "import os\nfor fd in range(3, 64):\n    try: os.write(fd, " + line + ")\n    except OSError: pass"
	}
	for _, tt := range []struct{ name, code string }{
		{"a forged line", forge(`b'{"type":"exec","cmd":"rm -rf /"}\n'`)},
		{"a line past the bound", forge(`b'{"type":"stdout","text":"' + b'x' * (9 << 20)`)},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			if _, lines := execute(t, base, sb, `{"code":"kept = 1"}`); !strings.HasSuffix(lineKinds(lines), "end_of_execution") {
				t.Fatalf("before: %s", lineKinds(lines))
			}
			body, _ := json.Marshal(map[string]string{"code": tt.code})
			status, lines := execute(t, base, sb, string(body))
			if k := lineKinds(lines); status != 200 || !strings.Contains(k, "error=KernelError") || !strings.HasSuffix(k, "end_of_execution") {
				t.Errorf("the hostile execution: %d %.300s", status, k)
			}
			for _, l := range lines {
				switch l["type"] {
				case "number_of_executions", "stdout", "stderr", "result", "error", "keepalive", "end_of_execution":
				default:
					t.Errorf("a line the kernel forged reached the client: %v", l)
				}
			}
			// A fresh kernel: the state went with the broken one.
			if _, lines := execute(t, base, sb, `{"code":"'kept' in dir()"}`); !strings.Contains(lineKinds(lines), "result=False") {
				t.Errorf("after: %s", lineKinds(lines))
			}
		})
	}
	t.Run("a_chatty_thread", func(t *testing.T) {
		// Output nobody reads between executions (a thread that keeps
		// printing) holds neither the kernel's next execution nor the
		// sandbox's end.
		sb := e2bCreate(t, base)
		code := `import threading, time
def chat():
    while True: print('x' * 4096)
threading.Thread(target=chat, daemon=True).start()`
		body, _ := json.Marshal(map[string]string{"code": code})
		if status, _ := execute(t, base, sb, string(body)); status != 200 {
			t.Fatalf("start the thread: %d", status)
		}
		time.Sleep(500 * time.Millisecond)
		req, _ := http.NewRequest("DELETE", base+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-KEY", e2bKey)
		start := time.Now()
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("the kill: %v after %v", err, time.Since(start))
		}
		resp.Body.Close()
		if resp.StatusCode != 204 || time.Since(start) > 10*time.Second {
			t.Errorf("the kill: %d after %v", resp.StatusCode, time.Since(start))
		}
	})
	t.Run("a_flood", func(t *testing.T) {
		sb := e2bCreate(t, base)
		status, lines := execute(t, base, sb, `{"code":"import sys\nfor _ in range(80): sys.stdout.write('y' * (1 << 20)); sys.stdout.flush()"}`)
		last := ""
		for _, l := range lines {
			if l["type"] == "error" {
				last = str(l["name"]) + ": " + str(l["value"])
			}
		}
		if status != 200 || !strings.HasPrefix(last, "LimitExceeded") || !strings.Contains(last, "output") {
			t.Errorf("a flood: %d, its error %q", status, last)
		}
		if status, _ := execute(t, base, sb, `{"code":"1"}`); status != 502 {
			t.Errorf("a call after the breach: %d, want 502", status)
		}
	})
}

// interpCall sends a code interpreter call as the SDK does (the
// sandbox's id and port 49999), with the traffic access token the SDK
// sends on every such call, and returns its status and body.
func interpCall(t *testing.T, base string, sb e2b.Sandbox, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	if sb.TrafficAccessToken != nil {
		req.Header.Set("E2B-Traffic-Access-Token", *sb.TrafficAccessToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestInterpreterContexts: E2B's /contexts on the wire. Contexts made,
// listed in order (the default Python one first), each with its own
// state and working directory; a bash context that keeps its shell's
// state; restart (state gone, the id kept) and delete (then not found);
// what cannot be served refused by name, and nothing made for it; a
// context of one sandbox not found through another's; no token, no
// sandbox.
func TestInterpreterContexts(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	base := serveE2B(t, "")
	sb := e2bCreate(t, base)
	if sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" {
		t.Fatal("create gave no trafficAccessToken, which the SDK sends on the interpreter's calls")
	}
	if status, body := interpCall(t, base, sb, "GET", "/health", ""); status != 200 || body != `"OK"` {
		t.Errorf("health: %d %s", status, body)
	}
	var ctxs []struct{ ID, Language, CWD string }
	status, body := interpCall(t, base, sb, "GET", "/contexts", "")
	if err := json.Unmarshal([]byte(body), &ctxs); status != 200 || err != nil || len(ctxs) != 1 || ctxs[0].Language != "python" {
		t.Fatalf("the first list: %d %s", status, body)
	}
	def := ctxs[0]
	// A context of its own, in /tmp: its own state and directory.
	var tmp struct{ ID, Language, CWD string }
	status, body = interpCall(t, base, sb, "POST", "/contexts", `{"language":"Python","cwd":"/tmp"}`)
	if err := json.Unmarshal([]byte(body), &tmp); status != 200 || err != nil || tmp.Language != "python" || tmp.CWD != "/tmp" || tmp.ID == def.ID {
		t.Fatalf("create: %d %s", status, body)
	}
	run := func(body string) string {
		t.Helper()
		_, lines := execute(t, base, sb, body)
		return lineKinds(lines)
	}
	if got := run(`{"code":"x = 'default'"}`); got != "number_of_executions=1 end_of_execution" {
		t.Errorf("default: %s", got)
	}
	if got := run(`{"code":"import os; os.getcwd(), 'x' in dir()","context_id":"` + tmp.ID + `"}`); got != "number_of_executions=1 result=('/tmp', False) end_of_execution" {
		t.Errorf("the /tmp context: %s", got)
	}
	if got := run(`{"code":"x","context_id":"` + def.ID + `"}`); got != "number_of_executions=2 result='default' end_of_execution" {
		t.Errorf("the default context by id: %s", got)
	}
	// bash, by language: its default context, its shell's state kept.
	if got := run(`{"code":"cd /tmp; y=5; echo $USER_SET","language":"bash","env_vars":{"USER_SET":"once"}}`); got != "number_of_executions=1 stdout=once end_of_execution" {
		t.Errorf("bash: %s", got)
	}
	if got := run(`{"code":"echo $PWD $y ${USER_SET-unset}; exit_code_here() { return 3; }; exit_code_here","language":"BASH"}`); got != "number_of_executions=2 stdout=/tmp 5 unset error=ExitCode end_of_execution" {
		t.Errorf("bash again: %s", got)
	}
	status, body = interpCall(t, base, sb, "GET", "/contexts", "")
	if err := json.Unmarshal([]byte(body), &ctxs); err != nil || len(ctxs) != 3 || ctxs[0].ID != def.ID || ctxs[1].ID != tmp.ID || ctxs[2].Language != "bash" {
		t.Errorf("the list: %d %s", status, body)
	}
	// Restart: the state gone, the id and directory kept.
	if status, body := interpCall(t, base, sb, "POST", "/contexts/"+tmp.ID+"/restart", ""); status != 200 {
		t.Errorf("restart: %d %s", status, body)
	}
	if got := run(`{"code":"y = 1\nos.getcwd()","context_id":"` + tmp.ID + `"}`); got != "number_of_executions=1 error=NameError end_of_execution" {
		t.Errorf("after restart: %s", got)
	}
	// Delete: then not found, and not listed.
	if status, body := interpCall(t, base, sb, "DELETE", "/contexts/"+tmp.ID, ""); status != 200 {
		t.Errorf("delete: %d %s", status, body)
	}
	status, body = interpCall(t, base, sb, "POST", "/execute", `{"code":"1","context_id":"`+tmp.ID+`"}`)
	if status != 404 || body != "Context "+tmp.ID+" not found" {
		t.Errorf("a deleted context: %d %s", status, body)
	}
	for _, tt := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"POST", "/contexts/" + tmp.ID + "/restart", "", 404, "not found"},
		{"DELETE", "/contexts/" + tmp.ID, "", 404, "not found"},
		{"POST", "/contexts", `{"language":"js"}`, 400, `language "javascript" is not served`},
		{"POST", "/contexts", `{"language":"r"}`, 400, `language "r" is not served`},
		{"POST", "/contexts", `{"cwd":"tmp"}`, 400, "absolute"},
		{"POST", "/contexts", `{"cwd":"/no/such/dir"}`, 400, "/no/such/dir: No such file or directory"},
		{"POST", "/contexts", `{"language":"bash","cwd":"/no/such/dir"}`, 400, "/no/such/dir: No such file or directory"},
		{"POST", "/execute", `{"code":"1","env_vars":{"A=B":"x"}}`, 400, "not a variable name"},
		{"POST", "/execute", `{"code":"1","context_id":"x","language":"python"}`, 400, "Only one of context_id or language"},
	} {
		status, body := interpCall(t, base, sb, tt.method, tt.path, tt.body)
		if status != tt.status || !strings.Contains(body, tt.says) {
			t.Errorf("%s %s %s: %d %s, want %d saying %q", tt.method, tt.path, tt.body, status, body, tt.status, tt.says)
		}
	}
	status, body = interpCall(t, base, sb, "GET", "/contexts", "")
	if err := json.Unmarshal([]byte(body), &ctxs); err != nil || len(ctxs) != 2 {
		t.Errorf("the list after the refusals: %d %s, want the default python and bash contexts", status, body)
	}
	// Another sandbox's context is not found through this one, nor
	// this one's through a token that is not its.
	other := e2bCreate(t, base)
	if status, _ := interpCall(t, base, other, "POST", "/execute", `{"code":"x","context_id":"`+def.ID+`"}`); status != 404 {
		t.Errorf("another sandbox's context: %d", status)
	}
	wrong := sb
	wrong.TrafficAccessToken = other.TrafficAccessToken
	for _, path := range []string{"/contexts", "/health"} {
		if status, _ := interpCall(t, base, wrong, "GET", path, ""); status != 502 {
			t.Errorf("GET %s with another sandbox's token: %d", path, status)
		}
	}
	wrong.TrafficAccessToken = nil
	if status, _ := interpCall(t, base, wrong, "POST", "/contexts", `{}`); status != 502 {
		t.Errorf("a context made without a token: %d", status)
	}
}

// bridges are the host pids of the kernels' bridges running now in the
// sandboxes of ids, with their pids in their sandboxes.
func bridges(t *testing.T, ids []string) map[int]string {
	t.Helper()
	found := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("-Xfrozen_modules=off\x00-c\x00")) {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if !slices.ContainsFunc(ids, func(id string) bool { return bytes.Contains(cg, []byte(id)) }) {
			continue
		}
		status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" {
				found[pid] = f[len(f)-1]
			}
		}
	}
	return found
}

// TestInterpreterPrestart: a tool whose pool names kernels starts them
// in each pooled sandbox before its claim (the bridges run, from the
// host's view, before any create), and the sandbox a create claims has
// them as its default contexts: the first runCode runs in the kernel
// that was already running (its pid), as its first execution, with the
// create's envVars; bash likewise. The tool is also offered under E2B
// template names.
func TestInterpreterPrestart(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	d, base := serveE2BDaemon(t, "  ci:\n    e2b_templates: [code-interpreter-v1, base]\n    pool: {warm: 1, kernels: [python, bash]}\n", nil)
	deadline := time.Now().Add(60 * time.Second)
	for d.Pool("ci").Stats().Idle < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %+v", d.Pool("ci").Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := bridges(t, d.Prebound())
	if len(before) != 2 {
		t.Fatalf("%d bridges run before the claim, want the pooled sandbox's python and bash: %v", len(before), before)
	}
	req, _ := http.NewRequest("POST", base+"/v2/sandboxes", strings.NewReader(`{"templateID":"code-interpreter-v1","envVars":{"FROM_CREATE":"yes"}}`))
	req.Header.Set("X-API-KEY", e2bKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb e2b.Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	nspids := map[string]bool{}
	for _, p := range before {
		nspids[p] = true
	}
	_, lines := execute(t, base, sb, `{"code":"import os\nprint(os.getpid(), os.environ.get('FROM_CREATE'))"}`)
	// "number_of_executions=1 stdout=PID yes end_of_execution"
	got := strings.Fields(lineKinds(lines))
	if len(got) != 4 || got[0] != "number_of_executions=1" || !nspids[strings.TrimPrefix(got[1], "stdout=")] || got[2] != "yes" {
		t.Errorf("the first runCode: %s, want the kernel that ran before the claim (pids %v) and the create's envVars", got, before)
	}
	_, lines = execute(t, base, sb, `{"code":"echo $FROM_CREATE; echo $PPID","language":"bash"}`)
	if got := lineKinds(lines); !strings.HasPrefix(got, "number_of_executions=1 stdout=yes") {
		t.Errorf("bash: %s", got)
	}
	// The claim's sandbox is replaced, its kernels started anew.
	deadline = time.Now().Add(60 * time.Second)
	for d.Pool("ci").Stats().Idle < 1 || len(bridges(t, d.Prebound())) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool's next sandbox has no kernels: %v", bridges(t, d.Prebound()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInterpreterCeilings: a kernel lives as long as its sandbox, and the
// ceilings of one command bound each of its executions: executions whose
// output adds up past the output ceiling, spread over a time past the
// time ceiling, all run; one execution past the output ceiling, the time
// ceiling or the CPU-time budget destroys the sandbox and is told which
// limit (later calls find nothing).
func TestInterpreterCeilings(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	base := serveE2B(t, "  short: {limits: {time: 3s, output: 1MiB, cpu_time: 1s}}\n")
	create := func() e2b.Sandbox {
		req, _ := http.NewRequest("POST", base+"/v2/sandboxes", strings.NewReader(`{"templateID":"short"}`))
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
	sb := create()
	start := time.Now()
	for i := range 4 {
		_, lines := execute(t, base, sb, `{"code":"import time\nprint('x' * (600 << 10))\ntime.sleep(0.8)"}`)
		if k := lineKinds(lines); strings.Contains(k, "error") || !strings.HasSuffix(k, "end_of_execution") {
			t.Fatalf("execution %d (%v in): %.200s", i, time.Since(start), k)
		}
	}
	if time.Since(start) < 3*time.Second {
		t.Fatalf("the executions took %v, less than the time ceiling they should outlive", time.Since(start))
	}
	for _, tt := range []struct{ name, code, limit string }{
		{"output", `print('y' * (2 << 20))`, "output"},
		{"time", `import time\ntime.sleep(30)`, "time"},
		{"cpu", `while True: pass`, "cpu"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sb := create()
			started := time.Now()
			_, lines := execute(t, base, sb, `{"code":"`+tt.code+`"}`)
			var last string
			for _, l := range lines {
				if l["type"] == "error" {
					last = str(l["name"]) + ": " + str(l["value"])
				}
			}
			if !strings.HasPrefix(last, "LimitExceeded") || !strings.Contains(last, tt.limit) || time.Since(started) > 20*time.Second {
				t.Errorf("an execution past the %s ceiling: %q after %v", tt.limit, last, time.Since(started))
			}
			if status, _ := execute(t, base, sb, `{"code":"1"}`); status != 502 {
				t.Errorf("a call after the breach: %d, want 502", status)
			}
		})
	}
}

// TestE2BFilesBeyondWorkspace: the files API writes the sandbox's own
// writable directories, /tmp as well as the workspace, each resolved
// inside itself, and reads the rest of its read-only root as the sandbox
// can: what it writes in /tmp the code reads there, what the code writes
// there it reads; the image's /etc/hostname is read; a symlink the code
// plants in /tmp is not followed, paths into /proc or /dev (other mounts)
// are refused, and a write into the read-only root is refused by name
// (the root is mounted read-only besides).
func TestE2BFilesBeyondWorkspace(t *testing.T) {
	needKernel(t)
	hostOnly(t)
	base := serveE2B(t, "")
	sb := e2bCreate(t, base)
	call := func(method, p string, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/files?path="+url.QueryEscape(p), strings.NewReader(body))
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := call("POST", "/tmp/in/a.txt", "from the host"); status != 200 || !strings.Contains(body, `"/tmp/in/a.txt"`) {
		t.Fatalf("write /tmp/in/a.txt: %d %s", status, body)
	}
	code := `import os\nprint(open('/tmp/in/a.txt').read(), os.stat('/tmp/in/a.txt').st_uid)\nopen('/tmp/out.txt', 'w').write('from the code')\nos.symlink('/etc/hostname', '/tmp/link')`
	if _, lines := execute(t, base, sb, `{"code":"`+code+`"}`); lineKinds(lines) != "number_of_executions=1 stdout=from the host 1000 end_of_execution" {
		t.Errorf("the code's view: %s", lineKinds(lines))
	}
	if status, body := call("GET", "/tmp/out.txt", ""); status != 200 || body != "from the code" {
		t.Errorf("read /tmp/out.txt: %d %q", status, body)
	}
	for _, p := range []string{"/etc/hostname", "/tmp/../etc/hostname"} {
		if status, body := call("GET", p, ""); status != 200 || body != "sandbox\n" {
			t.Errorf("read %s: %d %q, want the sandbox's own", p, status, body)
		}
	}
	for _, p := range []string{"/tmp/link", "/proc/1/environ", "/proc/self/environ", "/dev/null", "/tmpx/a", "/tmp"} {
		if status, body := call("GET", p, ""); status == 200 {
			t.Errorf("read %s: %d %q, want a refusal", p, status, body)
		}
	}
	for _, p := range []string{"/usr/x", "/etc/x", "/x"} {
		if status, body := call("POST", p, "no"); status != 403 || !strings.Contains(body, "read-only") {
			t.Errorf("write %s: %d %s, want 403 naming the read-only root", p, status, body)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is on the host (%v)", p, err)
		}
	}
}
