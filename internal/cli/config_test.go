package cli

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigCheck runs `airlock config check` on every example and the
// deployment config in the repository (each must pass), and on files the
// daemon would not start with (each must fail, saying why).
func TestConfigCheck(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_VM") != "" {
		t.Skip("the repository's files are not in the guest; the host's run covers this")
	}
	bin := airlockBin(t)
	check := func(path string) (string, int) {
		t.Helper()
		out, err := exec.Command(bin, "config", "check", "--config", path, "--image-store", t.TempDir()).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 5 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		out, code := check(f)
		if code != 0 || !strings.Contains(out, "\nok: ") || !strings.Contains(out, "config:       "+f) {
			t.Errorf("%s: exit %d\n%s", f, code, out)
		}
	}
	// The deployment config names the group "airlock": it passes where
	// serve would start with it, and fails, as serve would, where there
	// is no such group, saying how to make it.
	deploy := "../../deploy/airlock.yaml"
	out, code := check(deploy)
	if _, err := user.LookupGroup("airlock"); err == nil {
		if code != 0 || !strings.Contains(out, "\nok: ") {
			t.Errorf("%s: exit %d\n%s", deploy, code, out)
		}
	} else if code != 1 || !strings.Contains(out, `there is no group "airlock" on this host: create it (groupadd --system airlock)`) {
		t.Errorf("%s without the group airlock: exit %d, want 1 naming the group\n%s", deploy, code, out)
	}
	out, _ = check("../../examples/python.yaml")
	for _, want := range []string{"tool python: Runs a Python 3 snippet", "egress:     pypi.org:443, files.pythonhosted.org:443", "limits:     memory 512MiB, pids 64, disk 256MiB, fds 1024, output 1MiB, time 1m0s", "pool:       2 warm"} {
		if !strings.Contains(out, want) {
			t.Errorf("python.yaml: no %q in\n%s", want, out)
		}
	}
	if out, code := check(writeConfig(t, "server: {capacity: {sandboxes: 40, memory: 3GiB, pids: 5000}}\n")); code != 0 || !strings.Contains(out, "capacity:     40 sandboxes, 3.0 GiB of memory ceilings, 5000 pids") {
		t.Errorf("the capacity: exit %d\n%s", code, out)
	}
	// What check shows of the listeners and destinations.
	tok := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tok, []byte("a-token-of-thirty-two-characters-or-more"), 0o600)
	shown := writeConfig(t, "server:\n  socket_group: \"0\"\n  tcp: 127.0.0.1:7400\n  e2b: 127.0.0.1:7401\n  tokens: [{name: ci, secret: t, tools: [\"*\"]}]\nsecrets:\n  t: {file: "+tok+"}\n"+
		"tools:\n  a:\n    egress: [{host: mirror.internal, addresses: [10.0.0.5], private: true}, example.com]\n")
	out, code = check(shown)
	for _, want := range []string{"e2b:          127.0.0.1:7401", "egress:     mirror.internal:443 (private: true), example.com:443", "\nok: "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, no %q in\n%s", code, want, out)
		}
	}
	for _, tt := range []struct{ name, body, want string }{
		{"an unknown key", "tools:\n  a: {limits: {memroy: 1GiB}}\n", `unknown field "memroy"`},
		{"a socket group the host lacks", "server: {socket_group: no-such-group-x}\n", `there is no group "no-such-group-x" on this host: create it (groupadd --system no-such-group-x)`},
		{"a tool over the capacity", "server: {capacity: {memory: 100MiB}}\ntools:\n  a: {limits: {memory: 1GiB}}\n", `tool a: `},
		{"an image not in the store", "tools:\n  a: {image: python:3.12}\n", `tool a: `},
		{"a service the file lacks", "tools:\n  a: {services: [gh]}\n", `"gh"`},
	} {
		out, code := check(writeConfig(t, tt.body))
		if code != 1 || !strings.Contains(out, tt.want) || strings.Contains(out, "\nok: ") {
			t.Errorf("%s: exit %d, want 1 mentioning %q:\n%s", tt.name, code, tt.want, out)
		}
	}
	if out, code := check("/nonexistent/airlock.yaml"); code != 1 || !strings.Contains(out, "/nonexistent/airlock.yaml") {
		t.Errorf("a missing file: exit %d\n%s", code, out)
	}
}

// TestDoctor: on this host every check passes and a real sandbox runs;
// a config the daemon would refuse fails its line and the exit status.
func TestDoctor(t *testing.T) {
	requireRoot(t)
	args := []string{"doctor", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup}
	o := execAirlock(t, nil, "", append(args, "--config", writeConfig(t, "tools:\n  sh: {}\n"))...)
	if o.code != 0 {
		t.Fatalf("doctor: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	for _, want := range []string{"ok    root ", "ok    user ns ", "ok    cgroups ", "ok    seccomp ", "ok    id range ", "ok    sandbox        created, ran /bin/true, destroyed"} {
		if !strings.Contains(o.stdout, want) {
			t.Errorf("doctor: no %q in\n%s", want, o.stdout)
		}
	}
	o = execAirlock(t, nil, "", append(args, "--no-sandbox", "--config", writeConfig(t, "tools:\n  a: {limits: {memroy: 1GiB}}\n"))...)
	if o.code != 1 || !strings.Contains(o.stdout, "FAIL  config") || !strings.Contains(o.stdout, `unknown field "memroy"`) || strings.Contains(o.stdout, "sandbox ") {
		t.Errorf("doctor with a bad config: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if n := cliCgroups(t); n != 0 {
		t.Errorf("%d sandbox cgroups left after doctor", n)
	}
}

// TestOneShotRunAudited: with an audit section in the config, a run made
// here (no daemon) is recorded there as the daemon records its runs; a
// log that cannot be written stops the run before it starts.
func TestOneShotRunAudited(t *testing.T) {
	requireRoot(t)
	db := filepath.Join(t.TempDir(), "audit.db")
	sock := filepath.Join(t.TempDir(), "none.sock")
	cfg := writeConfig(t, "audit: {path: "+db+"}\ntools:\n  sh: {limits: {time: 1s}}\n")
	if o := airlock(t, "", "--config", cfg, "--tool", "sh", "--socket", sock, "--", "sh", "-c", "exit 3"); o.code != 3 {
		t.Fatalf("run: exit %d %q", o.code, o.stderr)
	}
	if o := airlock(t, "", "--config", cfg, "--tool", "sh", "--socket", sock, "--", "sleep", "5"); o.code != ExitLimit {
		t.Fatalf("breach: exit %d %q", o.code, o.stderr)
	}
	o := execAirlock(t, nil, "", "audit", "--db", db, "--kind", "run", "--json")
	lines := strings.Split(strings.TrimSpace(o.stdout), "\n")
	if o.code != 0 || len(lines) != 4 || !strings.Contains(lines[1], `"decision":"exited"`) || !strings.Contains(lines[1], `"exit_code":3`) ||
		!strings.Contains(lines[3], `"decision":"limit"`) || !strings.Contains(lines[0], `"client":"cli:uid=0,pid=`) || !strings.Contains(lines[0], `"one_shot":true`) {
		t.Fatalf("audit: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := execAirlock(t, nil, "", "audit", "--db", db, "--kind", "limit.breach"); strings.Count(o.stdout, "\n") != 1 {
		t.Fatalf("limit.breach: %q", o.stdout)
	}
	// A log in a directory that is a file: the run does not start.
	bad := writeConfig(t, "audit: {path: "+cfg+"/audit.db}\ntools:\n  sh: {}\n")
	if o := airlock(t, "", "--config", bad, "--tool", "sh", "--socket", sock, "--", "sh", "-c", "echo ran"); o.code != ExitFailure || strings.Contains(o.stdout, "ran") || !strings.Contains(o.stderr, "audit log cannot be written") {
		t.Fatalf("unwritable log: exit %d %q %q", o.code, o.stdout, o.stderr)
	}
}

// TestStateDirUnreachable: a state directory below a directory the
// sandboxes' users cannot pass through (mktemp -d's 0700) is caught by
// run, serve, doctor and config check alike, each naming the directory,
// its mode and the fix, instead of every sandbox failing at its mount.
func TestStateDirUnreachable(t *testing.T) {
	requireRoot(t)
	base := t.TempDir() // 0700, as mktemp -d makes
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	cfg := writeConfig(t, "tools:\n  sh: {}\n")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"run", []string{"run", "--state-dir", state, "--cgroup-parent", testCgroup, "--", "true"}, ExitFailure},
		{"serve", []string{"serve", "--state-dir", state, "--cgroup-parent", testCgroup, "--config", cfg, "--audit", filepath.Join(t.TempDir(), "audit.db"), "--socket", filepath.Join(t.TempDir(), "s.sock")}, ExitFailure},
		{"doctor", []string{"doctor", "--state-dir", state, "--cgroup-parent", testCgroup, "--config", cfg, "--no-sandbox"}, 1},
		{"config check", []string{"config", "check", "--state-dir", state, "--config", cfg}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Without the check, serve would run on, its sandboxes failing.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, airlockBin(t), tt.args...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			all := string(out)
			if code != tt.code || !strings.Contains(all, base+" has mode 0700") || !strings.Contains(all, "chmod o+x "+base) {
				t.Fatalf("exit %d, want %d naming %s, its mode and chmod o+x:\n%s", code, tt.code, base, all)
			}
		})
	}
}
