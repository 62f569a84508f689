package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

// airlockBin is the real binary: the CLI is tested as users run it.
func airlockBin(t *testing.T) string {
	return testutil.Binary(t, "github.com/airlockhq/airlock/cmd/airlock")
}

func requireRoot(t *testing.T) { testutil.RequireRoot(t) }

// testCgroup is the cgroup parent of every airlock the tests run.
var testCgroup = testutil.CgroupParent("/airlock-test-cli")

type outcome struct {
	code           int
	stdout, stderr string
}

// airlock runs `airlock run` with test-private state and cgroup parent.
func airlock(t *testing.T, stdin string, args ...string) outcome {
	t.Helper()
	return airlockEnv(t, nil, stdin, args...)
}

// airlockEnv is airlock with extra variables in airlock's own environment.
func airlockEnv(t *testing.T, env []string, stdin string, args ...string) outcome {
	t.Helper()
	full := append([]string{"run", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}, args...)
	return execAirlock(t, append([]string{"AIRLOCK_TEST_SECRET=hunter2"}, env...), stdin, full...)
}

// execAirlock runs the airlock binary with args as they are.
func execAirlock(t *testing.T, env []string, stdin string, args ...string) outcome {
	t.Helper()
	cmd := exec.Command(airlockBin(t), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return outcome{code, out.String(), errb.String()}
}

func TestRunExitCodes(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stdoutNone string
	}{
		{"hello", []string{"--", "sh", "-c", "echo hello from a sandbox; id -u"}, 0, "hello from a sandbox\n1000\n", "", ""},
		{"own exit code", []string{"--", "sh", "-c", "exit 7"}, 7, "", "", ""},
		{"signal", []string{"--", "sh", "-c", "kill -KILL $$"}, 128 + 9, "", "", ""},
		{"limit", []string{"--time", "200ms", "--", "sleep", "10"}, ExitLimit, "", "airlock: limit exceeded: time limit of 200ms reached (observed ", ""},
		{"memory limit line", []string{"--memory", "16MiB", "--", "sh", "-c", "head -c 100000000 /dev/zero > /dev/shm/x; sleep 10"}, ExitLimit, "", "airlock: limit exceeded: ", ""},
		{"not found", []string{"--", "no-such-cmd"}, 127, "", "command not found", ""},
		{"env flag and no host env", []string{"--env", "A=b", "--", "sh", "-c", "echo $A; env"}, 0, "", "", "hunter2"},
		{"workdir", []string{"--workdir", "/tmp", "--", "pwd"}, 0, "/tmp\n", "", ""},
		{"missing workdir", []string{"--workdir", "/nope", "--", "pwd"}, 126, "", "working directory /nope", ""},
		{"bad size", []string{"--memory", "12XB", "--", "true"}, ExitFailure, "", "-memory", ""},
		{"bad count", []string{"--pids", "-3", "--", "true"}, ExitFailure, "", "-pids", ""},
		{"bad duration", []string{"--time", "soon", "--", "true"}, ExitFailure, "", "-time", ""},
		{"bad cpu", []string{"--cpu", "lots", "--", "true"}, ExitFailure, "", "-cpu", ""},
		{"bad env", []string{"--env", "NOEQUALS", "--", "true"}, ExitFailure, "", "-env", ""},
		{"relative workdir", []string{"--workdir", "rel", "--", "true"}, ExitFailure, "", "-workdir", ""},
		{"no command", []string{}, ExitFailure, "", "no command", ""},
		{"memory too small", []string{"--memory", "1KiB", "--", "true"}, ExitFailure, "", "memory", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := airlock(t, "", tt.args...)
			if o.code != tt.code {
				t.Fatalf("exit %d, want %d (stdout %q stderr %q)", o.code, tt.code, o.stdout, o.stderr)
			}
			if tt.stdout != "" && o.stdout != tt.stdout {
				t.Errorf("stdout %q, want %q", o.stdout, tt.stdout)
			}
			if !strings.Contains(o.stderr, tt.stderrHas) {
				t.Errorf("stderr %q lacks %q", o.stderr, tt.stderrHas)
			}
			if tt.stdoutNone != "" && strings.Contains(o.stdout, tt.stdoutNone) {
				t.Errorf("stdout %q contains %q", o.stdout, tt.stdoutNone)
			}
		})
	}
}

func TestRunStdin(t *testing.T) {
	requireRoot(t)
	o := airlock(t, "print(6*7)\n", "--", "python3")
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		o = airlock(t, "echo $((6*7))\n", "--", "sh")
	}
	if o.code != 0 || o.stdout != "42\n" {
		t.Fatalf("got %d %q %q, want 0 and 42", o.code, o.stdout, o.stderr)
	}
}

func TestRunJSON(t *testing.T) {
	requireRoot(t)
	o := airlock(t, "", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if o.code != 3 {
		t.Fatalf("exit %d, want 3: %s", o.code, o.stderr)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(o.stdout), &raw); err != nil {
		t.Fatalf("not one JSON object: %q: %v", o.stdout, err)
	}
	for _, f := range []string{"sandbox_id", "outcome", "exit_code", "signal", "limit", "error", "stdout", "stderr", "truncated", "usage", "evidence"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("result lacks %q", f)
		}
	}
	var r result.Result
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.Exited || r.ExitCode != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.SandboxID == "" {
		t.Errorf("got %+v", r)
	}
	var usage map[string]json.RawMessage
	json.Unmarshal(raw["usage"], &usage)
	for _, f := range []string{"wall_ms", "cpu_ms", "memory_peak_bytes", "pids_peak", "disk_peak_bytes"} {
		if _, ok := usage[f]; !ok {
			t.Errorf("usage lacks %q", f)
		}
	}
}

func TestRunJSONLimit(t *testing.T) {
	requireRoot(t)
	o := airlock(t, "", "--json", "--output", "100", "--", "yes")
	var r result.Result
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatalf("%q: %v", o.stdout, err)
	}
	if o.code != ExitLimit || r.Outcome != result.LimitExceeded || r.Limit.Name != "output" || r.Limit.Ceiling != 100 || !r.Truncated || len(r.Stdout) != 100 {
		t.Fatalf("got exit %d %+v", o.code, r)
	}
}

func TestRunEvents(t *testing.T) {
	requireRoot(t)
	o := airlock(t, "", "--events", "--sample-interval", "50ms", "--", "sh", "-c", "echo a; sleep 0.3; echo b >&2")
	sc := bufio.NewScanner(strings.NewReader(o.stdout))
	var types []string
	var last result.Event
	for sc.Scan() {
		var e result.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		types = append(types, e.Type)
		last = e
	}
	// Samples come on their own clock (on a slow guest one can come
	// before the first output); the output and the result keep their
	// order.
	var ordered []string
	for _, ty := range types {
		if ty != "sample" {
			ordered = append(ordered, ty)
		}
	}
	joined := strings.Join(types, ",")
	if strings.Join(ordered, ",") != "stdout,stderr,result" || !strings.Contains(joined, "sample") || last.Result == nil || last.Result.Outcome != result.Exited {
		t.Fatalf("events %s, last %+v", joined, last)
	}
}

// TestRunKilledLeavesNothing kills `airlock run` itself while its command
// runs; the next run sweeps whatever the dead one left.
func TestRunKilledLeavesNothing(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command(airlockBin(t), "run", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup, "--", "sh", "-c", "echo up; sleep 100")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(out).ReadString('\n')
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	time.Sleep(100 * time.Millisecond)
	// The next airlock sweeps leftovers before it starts work.
	if o := airlock(t, "", "--", "true"); o.code != 0 {
		t.Fatalf("next run: %d %s", o.code, o.stderr)
	}
	for _, pat := range []string{"/sys/fs/cgroup/*" + testCgroup + "/*", "/sys/fs/cgroup" + testCgroup + "/*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				t.Errorf("cgroup left: %s", p)
			}
		}
	}
	ents, _ := os.ReadDir("/run/airlock-test-cli/sandboxes")
	if len(ents) != 0 {
		t.Errorf("%d lock files left", len(ents))
	}
}

// TestInterruptDestroys ends airlock run with a signal: it destroys the
// sandbox and exits as a shell reports a program the signal killed, not as
// a failure of airlock (125).
func TestInterruptDestroys(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		sig  syscall.Signal
		code int
		msg  string
	}{
		{syscall.SIGINT, 130, "airlock: interrupted; sandbox destroyed"},
		{syscall.SIGTERM, 143, "airlock: ended by SIGTERM; sandbox destroyed"},
		{syscall.SIGHUP, 129, "airlock: ended by SIGHUP; sandbox destroyed"},
	}
	for _, tt := range tests {
		t.Run(tt.sig.String(), func(t *testing.T) {
			cmd := exec.Command(airlockBin(t), "run", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup, "--", "sh", "-c", "echo up; sleep 100")
			out, _ := cmd.StdoutPipe()
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			bufio.NewReader(out).ReadString('\n')
			cmd.Process.Signal(tt.sig)
			err := cmd.Wait()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != tt.code || !strings.Contains(errb.String(), tt.msg) {
				t.Fatalf("got %v (stderr %q), want exit %d and %q", err, errb.String(), tt.code, tt.msg)
			}
		})
	}
}

func TestVersionAndUsage(t *testing.T) {
	cmd := exec.Command(airlockBin(t), "version")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "airlock ") {
		t.Fatalf("version: %q %v", out, err)
	}
	cmd = exec.Command(airlockBin(t), "frobnicate")
	if err := cmd.Run(); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// TestRunReaderGoesAway closes airlock's stdout early: the command must get
// the broken pipe (and airlock say so) instead of running until its time
// limit, and airlock must still clean up.
func TestRunReaderGoesAway(t *testing.T) {
	requireRoot(t)
	script := airlockBin(t) + ` run --state-dir /run/airlock-test-cli --cgroup-parent ` + testCgroup + ` --time 60s -- yes | head -1; echo "${PIPESTATUS[0]}" >&2`
	cmd := exec.Command("bash", "-c", script)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(errb.String()); got != "141" {
		t.Fatalf("airlock exit status %q, want 141 (the command killed by SIGPIPE)", got)
	}
	if out.String() != "y\n" {
		t.Fatalf("stdout %q", out.String())
	}
	ents, _ := os.ReadDir("/run/airlock-test-cli/sandboxes")
	if len(ents) != 0 {
		t.Errorf("%d lock files left", len(ents))
	}
}

// TestInheritedDescriptorsStayOutside starts airlock with an extra open
// descriptor, as a shell redirection or a supervisor would leave it: the
// command inside must not get it.
func TestInheritedDescriptorsStayOutside(t *testing.T) {
	requireRoot(t)
	secret, err := os.CreateTemp(t.TempDir(), "host-file")
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	cmd := exec.Command(airlockBin(t), "run", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup,
		"--", "sh", "-c", "ls /proc/self/fd")
	cmd.ExtraFiles = []*os.File{secret, secret, secret} // fds 3, 4, 5 of airlock, without close-on-exec
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	// sh's 0, 1, 2 and the directory ls reads; nothing else.
	if got := strings.Fields(string(out)); len(got) > 4 {
		t.Fatalf("command holds descriptors %v", got)
	}
}

// TestStrictUmask runs airlock with umask 077, as a careful operator's
// shell may have it: the sandbox's /etc and workspace stay usable by its
// user, and commands get the usual 022.
func TestStrictUmask(t *testing.T) {
	requireRoot(t)
	airlockBin(t) // built before, with the usual umask
	old := syscall.Umask(0o077)
	o := airlock(t, "", "--", "sh", "-c", "umask; id -un; cat /etc/hostname; echo x > f && cat f")
	syscall.Umask(old)
	if o.code != 0 || o.stdout != "0022\nsandbox\nsandbox\nx\n" {
		t.Fatalf("with umask 077: exit %d %q %q", o.code, o.stdout, o.stderr)
	}
}

// TestUsageErrors: a command line airlock cannot take ends every command
// the same way: exit 125, one line saying what is wrong and a pointer to
// -h, never the whole usage. -h prints the command's own usage and exits 0.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"run", "--memory", "lots", "--", "true"},
		{"run", "--bogus", "--", "true"},
		{"serve", "--bogus"},
		{"serve", "extra"},
		{"session", "bogus"},
		{"session", "exec", "--bogus", "x"},
		{"session", "exec", "s_1"},
		{"session", "create"},
		{"session", "rm"},
		{"pool"},
		{"pool", "ls", "extra"},
		{"audit", "--limit", "0"},
		{"image", "bogus"},
		{"image", "inspect"},
		{"config"},
		{"config", "check", "--bogus"},
		{"mcp", "--bogus"},
	} {
		o := execAirlock(t, nil, "", args...)
		lines := strings.Split(strings.TrimSpace(o.stderr), "\n")
		if o.code != ExitUsage || len(lines) != 2 || !strings.HasPrefix(lines[1], "Run 'airlock") || !strings.HasSuffix(lines[1], " -h' for its usage.") {
			t.Errorf("airlock %v: exit %d, stderr:\n%s", args, o.code, o.stderr)
		}
	}
	for _, tt := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"session", "exec", "-h"}, "exec [-t] ID -- CMD", "-tool"},
		{[]string{"session", "create", "-h"}, "-tool", "exec ID"},
		{[]string{"run", "-h"}, "-memory", ""},
		{[]string{"config", "check", "-h"}, "-config", ""},
	} {
		o := execAirlock(t, nil, "", tt.args...)
		all := o.stdout + o.stderr
		if o.code != 0 || !strings.Contains(all, tt.want) || (tt.not != "" && strings.Contains(all, tt.not)) {
			t.Errorf("airlock %v: exit %d, want %q and not %q:\n%s", tt.args, o.code, tt.want, tt.not, all)
		}
	}
}

// TestHelpAndCompletion: every help topic prints its part of docs/; the
// bash completion completes commands, subcommands and each command's own
// flags (read from its -h, so they cannot drift).
func TestHelpAndCompletion(t *testing.T) {
	for topic, want := range map[string]string{
		"config": "# airlock.yaml", "limits": "### limits", "egress": "### network", "broker": "## Services and secrets",
		"server": "## audit", "images": "## Pulling from a registry", "mcp": "mcp_servers", "api": "## POST /v1/runs",
		"e2b": "## How it maps", "cluster": "## The audit trail across nodes",
	} {
		o := execAirlock(t, nil, "", "help", topic)
		if o.code != 0 || !strings.Contains(o.stdout, want) {
			t.Errorf("help %s: exit %d, no %q in %d bytes %s", topic, o.code, want, len(o.stdout), o.stderr)
		}
	}
	if o := execAirlock(t, nil, "", "help", "nope"); o.code != ExitUsage || !strings.Contains(o.stderr, `no topic "nope"`) {
		t.Errorf("help nope: exit %d %q", o.code, o.stderr)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	// The usage names every command and subcommand.
	if o := execAirlock(t, nil, "", "-h"); o.code != 0 || !strings.Contains(o.stdout, "airlock image import|pull|ls|inspect|rm|gc") || !strings.Contains(o.stdout, "e2b, cluster") {
		t.Errorf("usage: exit %d\n%s", o.code, o.stdout)
	}
	cfg := writeConfig(t, "tools:\n  sh: {}\n  sql: {}\n  python: {}\n")
	other := writeConfig(t, "tools:\n  sage: {}\n")
	script := `eval "$(airlock completion bash)"
c() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _airlock; echo "${COMPREPLY[*]}"; }
c airlock ru; c airlock run --mem; c airlock session ex; c airlock session exec --js; c airlock help eg; c airlock image p
c airlock help e2; c airlock help cl; c airlock run --t; c airlock run -t; c airlock run --tool s; c airlock run --config ` + other + ` --tool s`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = []string{"PATH=" + filepath.Dir(airlockBin(t)) + ":/usr/bin:/bin", "AIRLOCK_CONFIG=" + cfg}
	out, err := cmd.CombinedOutput()
	if want := "run\n--memory\nexec\n--json\negress\npull\ne2b\ncluster\n--time --token-file --tool --tty\n-t\nsh sql\nsage\n"; err != nil || string(out) != want {
		t.Errorf("bash completion: %v\n%s\nwant\n%s", err, out, want)
	}
	for _, sh := range []string{"zsh", "fish"} {
		if o := execAirlock(t, nil, "", "completion", sh); o.code != 0 || !strings.Contains(o.stdout, "airlock") {
			t.Errorf("completion %s: exit %d", sh, o.code)
		}
	}
}
