package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// TestServeBinary runs the real `airlock serve`, makes a run through its
// socket, and stops it with SIGTERM as an init system would.
func TestServeBinary(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 1}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock,
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", "/airlock-test-cli")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := client.New(sock)
	deadline := time.Now().Add(20 * time.Second)
	for c.Health(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("daemon never answered:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"echo", "through the daemon"}})
	if err != nil || string(r.Stdout) != "through the daemon\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	// The CLI goes through the daemon for a tool when no flag reshapes
	// the sandbox; output and exit codes are those of a run here.
	cli := func(stdin string, args ...string) (string, string, int) {
		o := execAirlock(t, nil, stdin, append([]string{"run", "--socket", sock, "--tool", "sh"}, args...)...)
		return o.stdout, o.stderr, o.code
	}
	if out, errs, code := cli("piped in", "--", "sh", "-c", "cat; echo; echo to-stderr >&2; exit 3"); out != "piped in\n" || !strings.Contains(errs, "to-stderr") || code != 3 {
		t.Fatalf("through the daemon: %q %q exit %d", out, errs, code)
	}
	out, _, code := cli("", "--json", "--", "sh", "-c", "exit 4")
	var res result.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 4 || res.ExitCode != 4 {
		t.Fatalf("--json through the daemon: %q exit %d (%v)", out, code, err)
	}
	st, err := c.Pools(t.Context())
	if err != nil || st[0].Hits+st[0].Misses < 3 {
		t.Fatalf("the runs did not go through the daemon: %+v %v", st, err)
	}
	// Sessions and pools from the command line.
	ac := func(stdin string, args ...string) (string, int) {
		o := execAirlock(t, nil, stdin, args...)
		if o.code != 0 && o.code != 5 {
			t.Logf("%v: stderr %s", args, o.stderr)
		}
		return o.stdout, o.code
	}
	id, code := ac("", "session", "create", "--socket", sock, "--tool", "sh")
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "s_") {
		t.Fatalf("session create: %q %d", id, code)
	}
	if _, code := ac("file body", "session", "cp", "--socket", sock, "-", id+":f.txt"); code != 0 {
		t.Fatalf("cp in: %d", code)
	}
	if out, code := ac("", "session", "exec", "--socket", sock, id, "--", "cat", "f.txt"); out != "file body" || code != 0 {
		t.Fatalf("exec: %q %d", out, code)
	}
	if _, code := ac("", "session", "exec", "--socket", sock, id, "--", "sh", "-c", "exit 5"); code != 5 {
		t.Fatalf("exec exit code: %d", code)
	}
	if out, code := ac("", "session", "cp", "--socket", sock, id+":f.txt", "-"); out != "file body" || code != 0 {
		t.Fatalf("cp out: %q %d", out, code)
	}
	if out, code := ac("", "pool", "ls", "--socket", sock); code != 0 || !strings.Contains(out, "sh ") {
		t.Fatalf("pool ls: %q %d", out, code)
	}
	if _, code := ac("", "session", "rm", "--socket", sock, id); code != 0 {
		t.Fatalf("session rm: %d", code)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func cliCgroups(t *testing.T) int {
	dir := "/sys/fs/cgroup/airlock-test-cli"
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		dir = "/sys/fs/cgroup/pids/airlock-test-cli"
	}
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// TestServeKilledThenRestarted kills the daemon with SIGKILL in the middle
// of a run: its sandboxes die with it, and the next daemon sweeps what is
// left before it serves, even on the same socket path.
func TestServeKilledThenRestarted(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 2}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	start := func() *exec.Cmd {
		cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock,
			"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", "/airlock-test-cli")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := client.New(sock)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ps, err := c.Pools(t.Context())
			if err == nil && ps[0].Idle == 2 {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("daemon not ready: %+v %v", ps, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := start()
	c := client.New(sock)
	go c.Run(context.Background(), api.RunRequest{Tool: "sh", Argv: []string{"sleep", "60"}})
	time.Sleep(300 * time.Millisecond)
	if n := cliCgroups(t); n < 3 {
		t.Fatalf("%d sandbox cgroups while running, want at least 3", n)
	}
	first.Process.Kill()
	first.Wait()
	second := start()
	// The first daemon's sandboxes are gone; only the new pool remains.
	if n := cliCgroups(t); n != 2 {
		t.Fatalf("%d sandbox cgroups after the restart, want the new pool's 2", n)
	}
	second.Process.Signal(syscall.SIGTERM)
	if err := second.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := cliCgroups(t); n != 0 {
		t.Fatalf("%d sandbox cgroups after shutdown", n)
	}
}
