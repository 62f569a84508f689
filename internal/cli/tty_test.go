package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// tmuxTerm is a real terminal: a tmux pane, driven with send-keys and read
// with capture-pane, as a user at a keyboard would.
type tmuxTerm struct {
	t    *testing.T
	sock string
}

// newTmux runs the shell command cmd in a pane of a tmux server of the
// test's own. The command is wrapped so that its exit status, and
// whether the terminal was left as it was found, show in the pane.
func newTmux(t *testing.T, cmd string) *tmuxTerm {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("needs tmux (scripts/test installs it)")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g history-limit 2000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrapped := fmt.Sprintf(`before=$(stty -g); %s; code=$?; [ "$(stty -g)" = "$before" ] && r=yes || r=no; echo "exit=$code restored=$r"; sleep 300`, cmd)
	tm := &tmuxTerm{t: t, sock: filepath.Join(dir, "tmux.sock")}
	start := exec.Command("tmux", "-S", tm.sock, "-f", conf, "new-session", "-d", "-x", "100", "-y", "30", "sh", "-c", wrapped)
	start.Env = tmuxEnv
	if out, err := start.CombinedOutput(); err != nil {
		// tmux insists on a UTF-8 locale; the cgroup-v2 guest has none.
		if strings.Contains(string(out), "UTF-8 locale") {
			t.Skipf("tmux cannot start here: %s", bytes.TrimSpace(out))
		}
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

var tmuxEnv = []string{"PATH=/usr/bin:/bin", "TERM=xterm", "HOME=/root"}

func (tm *tmuxTerm) run(args ...string) string {
	tm.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...)
	cmd.Env = tmuxEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// keys types keys (tmux key names: "Enter", "C-c").
func (tm *tmuxTerm) keys(keys ...string) {
	tm.run(append([]string{"send-keys", "-t", "0"}, keys...)...)
}

// screen is what the pane shows, with its scrollback.
func (tm *tmuxTerm) screen() string { return tm.run("capture-pane", "-p", "-J", "-S", "-", "-t", "0") }

// wait waits until the pane shows what matches re, and returns the match.
func (tm *tmuxTerm) wait(re string) []string {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := tm.screen()
		if m := rx.FindStringSubmatch(s); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal never showed %q; it shows:\n%s", re, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// size is the pane's size as "ROWS COLS", as stty size says it.
func (tm *tmuxTerm) size() string {
	return strings.TrimSpace(tm.run("display-message", "-p", "-t", "0", "#{pane_height} #{pane_width}"))
}

// TestInteractiveRun plays a user at a real terminal running `airlock run
// -it -- bash`, on each backend: a terminal of the sandbox's own with job
// control, its size and window changes, Ctrl-C interrupting the
// foreground job only, Ctrl-D ending the shell, and the user's terminal
// left as it was. Under gVisor init relays the terminal (its /proc shows
// no process's controlling terminal, so initctty=0 says nothing there).
func TestInteractiveRun(t *testing.T) {
	requireRoot(t)
	t.Run("namespaces", func(t *testing.T) { testInteractiveRun(t, "") })
	t.Run("gvisor", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the race detector's pass (-short) leaves gVisor to the plain one")
		}
		testInteractiveRun(t, "--isolation gvisor --runsc "+testutil.Runsc(t))
	})
}

func testInteractiveRun(t *testing.T, isolation string) {
	tm := newTmux(t, fmt.Sprintf("%s run --state-dir /run/airlock-test-cli --cgroup-parent %s %s -it -- bash --norc", airlockBin(t), testCgroup, isolation))
	tm.wait(`(?m)\$ $`)
	// Init holds no terminal: not the sandbox's, not the user's.
	tm.keys("stty size; tty; echo jobs=$(set -o | grep -c 'monitor.*on') initctty=$(cut -d' ' -f7 /proc/1/stat) kernel=$(uname -r)", "Enter")
	if k := tm.wait(`jobs=1 initctty=0 kernel=(\S+)`)[1]; strings.HasSuffix(k, "gvisor") != (isolation != "") {
		t.Fatalf("the shell ran on kernel %s", k)
	}
	if s := tm.screen(); !strings.Contains(s, tm.size()) || !strings.Contains(s, "/dev/pts/0") || strings.Contains(s, "no job control") {
		t.Fatalf("want the pane's size %q, the sandbox's /dev/pts/0 and job control; the terminal shows:\n%s", tm.size(), s)
	}
	// Ctrl-C ends the foreground job; the shell stays.
	tm.keys("sleep 30", "Enter")
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	tm.keys("C-c")
	tm.keys("echo after-$((6*7)) status-$?", "Enter")
	tm.wait("after-42 status-130")
	if time.Since(began) > 10*time.Second {
		t.Fatalf("Ctrl-C took %v to end sleep", time.Since(began))
	}
	// A window change reaches the shell's terminal.
	tm.run("resize-window", "-t", "0", "-x", "120", "-y", "40")
	tm.keys("clear; echo size=$(stty size)", "Enter")
	if got := tm.wait(`size=(\d+ \d+)`)[1]; got != tm.size() || got == "30 100" {
		t.Fatalf("after the resize the sandbox's terminal is %q, the pane %q", got, tm.size())
	}
	// Ctrl-D at an empty prompt ends the shell, and airlock with it:
	// typed once the prompt is back (typed earlier, readline's setup of
	// the terminal can discard it).
	tm.wait(`size=\d+ \d+\n[^\n]*\$ `)
	tm.keys("C-d")
	tm.wait("exit=0 restored=yes")
}

// TestInteractiveLimits: on a terminal the ceilings are those of any
// run: output past --output ends the run as a breach, which airlock names
// on the restored terminal.
func TestInteractiveLimits(t *testing.T) {
	requireRoot(t)
	tm := newTmux(t, fmt.Sprintf("%s run --state-dir /run/airlock-test-cli --cgroup-parent %s -t --output 64KiB -- bash --norc", airlockBin(t), testCgroup))
	tm.wait(`(?m)\$ $`)
	tm.keys("yes", "Enter")
	tm.wait("exit=124 restored=yes")
	if s := tm.screen(); !strings.Contains(s, "airlock: limit exceeded: output") {
		t.Fatalf("want the breach named; the terminal shows:\n%s", s)
	}
}

// TestInteractiveSessionExec: `airlock session exec -t` gives a shell on
// a terminal in a session's sandbox through the daemon, which keeps what
// the shell left for the next exec; `airlock run -it --tool` a shell in a
// run's, through the daemon too.
func TestInteractiveSessionExec(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh: {}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd, logs := serveCmd(t, cfg, sock, filepath.Join(t.TempDir(), "audit.db"))
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("daemon's log:\n%s", logs)
		}
	}()
	waitForDaemon(t, sock, logs, 30*time.Second)
	o := execAirlock(t, nil, "", "session", "create", "--socket", sock, "--tool", "sh")
	if o.code != 0 {
		t.Fatalf("session create: %+v", o)
	}
	id := strings.TrimSpace(o.stdout)
	tm := newTmux(t, fmt.Sprintf("%s session exec --socket %s -t %s -- bash --norc", airlockBin(t), sock, id))
	tm.wait(`(?m)\$ $`)
	tm.keys("stty size; echo in-$((2+3)) > /workspace/left; cat /workspace/left", "Enter")
	// The prompt back after the output: Ctrl-D typed before it can be
	// discarded by readline's setup of the terminal.
	tm.wait(`in-5\n[^\n]*\$ `)
	if s := tm.screen(); !strings.Contains(s, "30 100") {
		t.Fatalf("want the pane's size; the terminal shows:\n%s", s)
	}
	tm.keys("C-d")
	tm.wait("exit=0 restored=yes")
	o = execAirlock(t, nil, "", "session", "exec", "--socket", sock, id, "--", "cat", "/workspace/left")
	if o.code != 0 || o.stdout != "in-5\n" {
		t.Fatalf("the next exec: %+v", o)
	}
	// A run of a tool through the daemon, on a terminal.
	tm = newTmux(t, fmt.Sprintf("%s run --socket %s --tool sh -it -- bash --norc", airlockBin(t), sock))
	tm.wait(`(?m)\$ $`)
	tm.keys("echo via-$((3+4)) $(cut -d' ' -f7 /proc/$$/stat)", "Enter")
	if m := tm.wait(`via-7 (\d+)`); m[1] == "0" {
		t.Fatalf("the run's shell has no controlling terminal:\n%s", tm.screen())
	}
	tm.keys("exit 5", "Enter")
	tm.wait("exit=5 restored=yes")
}

// TestIgnoredSignalsStayOutside starts airlock, and a daemon, the way a
// shell starts a background job or nohup does: with SIGINT, SIGQUIT and
// SIGHUP ignored. Commands in their sandboxes still start with every
// signal's default action (an ignored one survives exec), so Ctrl-C on a
// terminal, or a kill -INT, still ends them.
func TestIgnoredSignalsStayOutside(t *testing.T) {
	requireRoot(t)
	const trap = `trap "" INT QUIT HUP; exec "$@"`
	// Init's and the command's.
	const want = "SigIgn:\t0000000000000000\nSigIgn:\t0000000000000000\n"
	// Several times: airlock's own handlers, installed while the sandbox
	// starts, used to hide the ignored signals from init now and then.
	for range 5 {
		run := exec.Command("sh", "-c", trap, "sh", airlockBin(t), "run", "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup,
			"--", "grep", "-h", "SigIgn", "/proc/1/status", "/proc/self/status")
		run.Env = []string{"PATH=/usr/bin:/bin"}
		if out, err := run.CombinedOutput(); err != nil || string(out) != want {
			t.Fatalf("airlock run started with signals ignored: %q %v, want %q", out, err, want)
		}
	}

	cfg := writeConfig(t, "tools:\n  sh: {}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	serve := exec.Command("sh", "-c", trap, "sh", airlockBin(t), "serve", "--config", cfg, "--socket", sock,
		"--audit", filepath.Join(t.TempDir(), "audit.db"), "--state-dir", "/run/airlock-test-cli", "--cgroup-parent", testCgroup)
	serve.Env = []string{"PATH=/usr/bin:/bin"}
	var logs bytes.Buffer
	serve.Stderr = &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	waitForDaemon(t, sock, &logs, 30*time.Second)
	o := execAirlock(t, nil, "", "run", "--socket", sock, "--tool", "sh", "--", "grep", "-h", "SigIgn", "/proc/1/status", "/proc/self/status")
	if o.code != 0 || o.stdout != want {
		t.Errorf("a run through a daemon started with signals ignored: %+v, want %q", o, want)
	}
}
