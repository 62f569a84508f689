package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/console"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/result"
)

// chromiumPath is where Debian's chromium is.
const chromiumPath = "/usr/bin/chromium"

// playwright is playwright-core's entry point (scripts/test installs it
// and says where), or the test is skipped.
func playwright(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AIRLOCK_TEST_PLAYWRIGHT_MODULES")
	if dir == "" {
		t.Skip("AIRLOCK_TEST_PLAYWRIGHT_MODULES is not set (scripts/test installs playwright-core and Debian's chromium)")
	}
	p := filepath.Join(dir, "playwright-core", "index.mjs")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("AIRLOCK_TEST_PLAYWRIGHT_MODULES is set, but playwright-core is not there: %v", err)
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("playwright-core is installed but %s is not: %v", chromiumPath, err)
	}
	return p
}

// TestConsole drives the web console in a real browser: runs made
// through the API (one that exits, one that breaches its memory, one
// whose egress is refused, one still running, a token's own) and what
// the page shows of them; the local operator's one-time login, used
// once; a run killed from the page; a token's holder, who sees only its
// own runs. The screenshots go to $AIRLOCK_TEST_SCREENSHOTS when set.
func TestConsole(t *testing.T) {
	pw := playwright(t)
	addr := freePort(t)
	t.Setenv("CONSOLE_TOK_B", "console-token-b-0123456789abcdef")
	d, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: b, secret: b, tools: [sh]}
secrets:
  b: {env: CONSOLE_TOK_B}
tools:
  sh:
    pool: {warm: 1}
    limits: {memory: 64MiB, time: 60s}
  web:
    egress:
      - {host: allowed.test, ports: [80], addresses: [127.0.0.1], private: true}
`, nil)
	_ = d
	c := client.New(sock)
	ctx := t.Context()
	if r, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"echo", "hello"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("run: %+v %v", r, err)
	}
	breach, err := c.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "head -c 200M /dev/zero | tail"}})
	if err != nil || breach.Outcome != result.LimitExceeded || breach.Limit == nil || breach.Limit.Name != result.LimitMemory {
		t.Fatalf("the breach: %+v %v", breach, err)
	}
	egress, err := c.Run(ctx, api.RunRequest{Tool: "web", Argv: []string{"sh", "-c", "curl -sS -m 5 http://refused.test/ || true"}})
	if err != nil || len(egress.Egress) == 0 || egress.Egress[0].Allow {
		t.Fatalf("the refused egress: %+v %v", egress, err)
	}
	code := egress.Egress[0].Code
	tok := client.NewTCP(addr, "console-token-b-0123456789abcdef")
	mine, err := tok.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"echo", "the token's"}})
	if err != nil {
		t.Fatal(err)
	}
	// One that runs while the page looks.
	liveDone := make(chan *result.Result, 1)
	go func() {
		r, _ := c.Run(context.WithoutCancel(ctx), api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", "head -c 8M /dev/zero > /tmp/f; sleep 50"}})
		liveDone <- r
	}()
	var live string
	for deadline := time.Now().Add(10 * time.Second); live == ""; time.Sleep(20 * time.Millisecond) {
		a, err := c.PS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Runs) == 1 {
			live = a.Runs[0].ID
		}
		if time.Now().After(deadline) {
			t.Fatal("the live run never showed")
		}
	}
	login, err := c.ConsoleLogin(ctx)
	if err != nil || !strings.HasPrefix(login, "http://"+addr+"/console/login?code=") {
		t.Fatalf("login link: %q %v", login, err)
	}
	// Not with a token.
	if _, err := tok.ConsoleLogin(ctx); err == nil {
		t.Error("a token got a console login link")
	}
	shots := os.Getenv("AIRLOCK_TEST_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "testdata/console.mjs")
	cmd.Env = append(os.Environ(), "PLAYWRIGHT="+pw, "CHROMIUM="+chromiumPath, "BASE=http://"+addr, "LOGIN_URL="+login, "SHOTS="+shots,
		"LIVE_RUN="+live, "BREACH_RUN="+breach.RunID, "EGRESS_RUN="+egress.RunID, "EGRESS_CODE="+code,
		"TOKEN=console-token-b-0123456789abcdef", "TOKEN_RUN="+mine.RunID)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	steps := scriptSteps(outb)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the browser's script: %v\n%s\n%s", err, outb, stderr.String())
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(steps[k], &s)
		return s
	}
	for k, want := range map[string]string{
		"who":       "as local",
		"live":      "sh",
		"tokenwho":  "as token:b",
		"breach":    fmt.Sprintf("breached memory: ceiling %d bytes", 64<<20),
		"command":   "sh -c head -c 200M /dev/zero | tail",
		"outcome":   "outcome limit",
		"breachrow": "limit.breach",
		"egressrow": "refused.test",
		"net":       code,
		"pool":      "fixed: pool.warm is 1",
		"policy":    "refused.test",
		"capacity":  "sandboxes",
	} {
		if got := str(k); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want it to say %q", k, got, want)
		}
	}
	for k, want := range map[string]string{
		"loginform": "true", "badcode": "true", "codeonce": "true", "killed": "true", "loggedout": "true",
		"filtered": `["egress"]`, "tokenclients": `["token:b"]`, "tokenbreach": "0", "errors": "[]",
	} {
		if got := string(steps[k]); got != want {
			t.Errorf("%s: %s, want %s", k, got, want)
		}
	}
	if n, _ := json.Number(string(steps["charts"])).Int64(); n < 3 {
		t.Errorf("the live run's page draws %s charts, want memory, pids, disk and cpu", steps["charts"])
	}
	// The kill from the page ended the run.
	select {
	case r := <-liveDone:
		if r == nil || r.Outcome != result.Signaled || !strings.Contains(r.Error, "airlock kill") {
			t.Errorf("the run killed from the console: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Error("the run killed from the console did not end")
	}
	// The page's files name no other origin: nothing is fetched from
	// elsewhere.
	for _, f := range []string{"/console/", "/console/console.js", "/console/console.css"} {
		resp, err := http.Get("http://" + addr + f)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(b.String(), "https://") || strings.Contains(b.String(), "//cdn") {
			t.Errorf("%s: %d, or it names another origin", f, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", f, csp)
		}
	}
	if t.Failed() {
		t.Logf("the browser's script said:\n%s\n%s", outb, stderr.String())
	}
}

// TestConsoleCookie: the cookie the console sets is the one the edges'
// audit wrapper knows as the console's (two packages that may not link
// each other name it).
func TestConsoleCookie(t *testing.T) {
	if edge.ConsoleCookie != console.Cookie {
		t.Errorf("edge.ConsoleCookie %q, console.Cookie %q", edge.ConsoleCookie, console.Cookie)
	}
}
