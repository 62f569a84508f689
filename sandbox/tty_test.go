package sandbox

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// typist plays a user at a terminal: once the output shows a step's cue,
// it types the step's keys or resizes the window. Output is what the
// terminal showed.
type typist struct {
	in     *io.PipeWriter
	resize chan WinSize
	end    bool // the user's input ends after the last step

	mu    sync.Mutex
	out   bytes.Buffer
	seen  int // output before this was matched by earlier cues
	steps []step
}

type step struct {
	cue string
	// after is how long the user waits after the cue: a key typed the
	// moment a shell prints something can come before the shell has
	// started its next command, and dash then holds an interrupt until
	// that command ends (as it would on any terminal).
	after  time.Duration
	keys   string
	resize *WinSize
}

func newTypist(end bool, steps ...step) (*typist, io.Reader) {
	pr, pw := io.Pipe()
	ty := &typist{in: pw, resize: make(chan WinSize, 1), end: end, steps: steps}
	ty.advance()
	return ty, pr
}

func (ty *typist) Write(b []byte) (int, error) {
	ty.mu.Lock()
	ty.out.Write(b)
	ty.mu.Unlock()
	ty.advance()
	return len(b), nil
}

// advance takes every step whose cue has shown.
func (ty *typist) advance() {
	ty.mu.Lock()
	var due []step
	for len(ty.steps) > 0 {
		i := strings.Index(ty.out.String()[ty.seen:], ty.steps[0].cue)
		if i < 0 {
			break
		}
		ty.seen += i + len(ty.steps[0].cue)
		due = append(due, ty.steps[0])
		ty.steps = ty.steps[1:]
	}
	last := len(due) > 0 && len(ty.steps) == 0
	ty.mu.Unlock()
	// Typing blocks until the terminal's feeder takes the keys: not
	// under mu, and not on the pump's goroutine for long.
	go func() {
		for _, s := range due {
			time.Sleep(s.after)
			if s.keys != "" {
				_, _ = ty.in.Write([]byte(s.keys))
			}
			if s.resize != nil {
				ty.resize <- *s.resize
			}
		}
		if last && ty.end {
			ty.in.Close()
		}
	}()
}

func (ty *typist) output() string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return ty.out.String()
}

// TestTTY runs commands on a terminal of the sandbox's own and plays the
// user: the terminal is the command's controlling one (under gVisor, whose
// /proc shows no process's terminal, /dev/tty opens) and the sandbox's
// (its devpts instance), job control works, Ctrl-C interrupts, Ctrl-D
// ends input, a window change reaches the command, and the output ceiling
// holds.
func TestTTY(t *testing.T) {
	tests := []ttyCase{
		{name: "a terminal of the sandbox's",
			argv: []string{"sh", "-c", `tty; stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-three;
				[ "$(stat -L -c %d /proc/self/fd/0)" = "$(stat -c %d /dev/pts)" ] && echo sandbox-devpts;
				set -- $(cat /proc/$$/stat); { [ "$7" != 0 ] || (exec 3</dev/tty) 2>/dev/null; } && [ "$6" = $$ ] && echo controlling`},
			end: true, outcome: result.Exited,
			want: []string{"/dev/pts/0\r\n", "24 80\r\n", "all-three", "sandbox-devpts", "controlling"}},
		{name: "job control",
			argv:  []string{"bash", "--norc", "-i"},
			steps: []step{{cue: "$ ", keys: "echo \"jobs:$(set -o | grep -c 'monitor.*on')\"; exit\n"}},
			end:   true, outcome: result.Exited,
			want: []string{"jobs:1"}, notWant: []string{"no job control"}},
		{name: "Ctrl-C interrupts",
			argv:    []string{"sh", "-c", "echo ready; sleep 30"},
			steps:   []step{{cue: "ready", after: 300 * time.Millisecond, keys: "\x03"}},
			outcome: result.Signaled, signal: int(unix.SIGINT)},
		{name: "Ctrl-D ends input",
			argv: []string{"cat"}, steps: []step{{keys: "abc\n"}}, end: true, outcome: result.Exited,
			want: []string{"abc\r\nabc\r\n"}},
		{name: "window change",
			argv:    []string{"sh", "-c", `trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done`},
			steps:   []step{{cue: "ready", resize: &WinSize{Rows: 50, Cols: 132}}},
			outcome: result.Exited, want: []string{"50 132\r\n"}},
		{name: "a background process holds the terminal", argv: []string{"sh", "-c", "sleep 30 & echo bye; exit 3"},
			end: true, outcome: result.Exited, code: 3, want: []string{"bye\r\n"}},
		{name: "not found", argv: []string{"no-such-command"}, end: true, outcome: result.Exited, code: 127,
			want: []string{"no-such-command: command not found"}},
		{name: "output ceiling", argv: []string{"sh", "-c", "while :; do echo 0123456789abcdef; done"},
			output: 4096, outcome: result.LimitExceeded, limit: result.LimitOutput},
	}
	for _, be := range backends(t) {
		for _, tt := range tests {
			t.Run(be.name+"/"+tt.name, func(t *testing.T) { testTTY(t, be, tt) })
		}
	}
}

// ttyCase is a command of TestTTY and what the user sees of it.
type ttyCase struct {
	name    string
	argv    []string
	steps   []step
	end     bool // input ends after the steps (a Ctrl-D)
	output  int64
	outcome result.Outcome
	code    int
	signal  int
	limit   string
	want    []string
	notWant []string
}

// testTTY runs one case of TestTTY on backend be: under gVisor init
// relays the terminal, which the host sees as pipes.
func testTTY(t *testing.T, be backend, tt ttyCase) {
	sb := ttySandbox(t, be, tt.output)
	ty, stdin := newTypist(tt.end, tt.steps...)
	defer ty.in.Close()
	began := time.Now()
	r := sb.Exec(t.Context(), ExecRequest{Argv: tt.argv, TTY: &WinSize{Rows: 24, Cols: 80}, Resize: ty.resize,
		Stdin: stdin, Stdout: ty, Stderr: ty, Capture: true})
	out := ty.output()
	limit := ""
	if r.Limit != nil {
		limit = r.Limit.Name
	}
	if r.Outcome != tt.outcome || r.ExitCode != tt.code || r.Signal != tt.signal || limit != tt.limit {
		t.Fatalf("got %s code %d signal %d limit %q (error %q) after %v, want %s code %d signal %d limit %q; terminal showed %q",
			r.Outcome, r.ExitCode, r.Signal, limit, r.Error, time.Since(began), tt.outcome, tt.code, tt.signal, tt.limit, out)
	}
	if string(r.Stdout) != out || len(r.Stderr) != 0 {
		t.Errorf("result holds stdout %q and stderr %q; want one stream, as shown: %q", r.Stdout, r.Stderr, out)
	}
	for _, w := range tt.want {
		if !strings.Contains(out, w) {
			t.Errorf("terminal showed %q, want %q in it", out, w)
		}
	}
	for _, w := range tt.notWant {
		if strings.Contains(out, w) {
			t.Errorf("terminal showed %q, want no %q in it", out, w)
		}
	}
	if tt.output > 0 && int64(len(out)) > tt.output {
		t.Errorf("terminal showed %d bytes past an output ceiling of %d", len(out), tt.output)
	}
}

// ttySandbox makes a sandbox on backend be for a terminal's commands,
// with a time ceiling of 20 s and, if output is set, that output ceiling;
// it is destroyed when the test ends.
func ttySandbox(t *testing.T, be backend, output int64) *Sandbox {
	t.Helper()
	l := DefaultLimits()
	l.Time = 20 * time.Second
	if output > 0 {
		l.Output = output
	}
	sb, err := testRuntime(t).Create(t.Context(), Spec{Limits: l, Isolation: isolationOf(be)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// TestTTYWhenPtysRunOut: a command holding every pseudo-terminal its
// sandbox may have leaves none for a command that asks for one, which is
// told so; a command without one still runs.
func TestTTYWhenPtysRunOut(t *testing.T) {
	rep, sb := holding(t, nil, "hold-ptys")
	if rep.Errno != int(unix.ENOSPC) {
		t.Fatalf("holding ptys: %+v", rep)
	}
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"true"}, TTY: &WinSize{}, KeepAlive: true})
	if r.Outcome != result.Error || !strings.Contains(r.Error, "pseudo-terminal") || !strings.Contains(r.Error, "no space left") {
		t.Fatalf("a terminal past the sandbox's bound: %s %q, want an error naming the terminal", r.Outcome, r.Error)
	}
	r = sb.Exec(t.Context(), ExecRequest{Argv: []string{"echo", "still"}, Capture: true, KeepAlive: true})
	if r.Outcome != result.Exited || string(r.Stdout) != "still\n" {
		t.Fatalf("a command without a terminal after: %s %q %q", r.Outcome, r.Stdout, r.Error)
	}
}

// TestSignal signals one command of a kept sandbox: the command and the
// processes of its group end, another command's do not, and the sandbox
// goes on.
func TestSignal(t *testing.T) {
	sb, err := testRuntime(t).Create(t.Context(), Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	other := make(chan *result.Result, 1)
	go func() {
		other <- sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "sleep 3; echo other-done"}, Capture: true, KeepAlive: true})
	}()
	sig := make(chan unix.Signal, 1)
	time.AfterFunc(300*time.Millisecond, func() { sig <- unix.SIGTERM })
	began := time.Now()
	r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "sleep 30 & sleep 30; echo never"}, Capture: true, KeepAlive: true, Signal: sig})
	if r.Outcome != result.Signaled || r.Signal != int(unix.SIGTERM) || time.Since(began) > 10*time.Second {
		t.Fatalf("signalled command: %s signal %d %q after %v", r.Outcome, r.Signal, r.Error, time.Since(began))
	}
	r = sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "ps -eo args | grep -c '^sleep 30' || true"}, Capture: true, KeepAlive: true})
	if r.Outcome != result.Exited || strings.TrimSpace(string(r.Stdout)) != "0" {
		t.Fatalf("sleeps of the signalled group left: %s %q %q", r.Outcome, r.Stdout, r.Error)
	}
	if o := <-other; o.Outcome != result.Exited || string(o.Stdout) != "other-done\n" {
		t.Fatalf("the other command: %s %q %q", o.Outcome, o.Stdout, o.Error)
	}
}

// TestTTYUnreadInput: a command on a terminal that reads none of what is
// typed (a megabyte, far past what a terminal holds) still ends when it
// ends, and the sandbox's next terminal works: under gVisor init's relay
// gives up typing into a terminal whose command has gone.
func TestTTYUnreadInput(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			sb := ttySandbox(t, be, 0)
			began := time.Now()
			r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "stty -icanon -echo; sleep 0.5; echo done; exit 4"},
				TTY: &WinSize{Rows: 24, Cols: 80}, Stdin: bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)), Capture: true, KeepAlive: true})
			if r.Outcome != result.Exited || r.ExitCode != 4 || !strings.Contains(string(r.Stdout), "done") || time.Since(began) > 10*time.Second {
				t.Fatalf("got %s code %d %q (error %q) after %v", r.Outcome, r.ExitCode, r.Stdout, r.Error, time.Since(began))
			}
			r = sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "read line; echo got:$line"}, TTY: &WinSize{Rows: 24, Cols: 80},
				Stdin: strings.NewReader("again\n"), Capture: true, KeepAlive: true})
			if r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "got:again") {
				t.Fatalf("the next terminal: %s code %d %q (error %q)", r.Outcome, r.ExitCode, r.Stdout, r.Error)
			}
			// With both commands gone the sandbox idles: nothing of their
			// terminals (init's relays, under gVisor) keeps running.
			time.Sleep(200 * time.Millisecond)
			before, err := sb.group.CPUUsage()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			after, err := sb.group.CPUUsage()
			if err != nil {
				t.Fatal(err)
			}
			if used := time.Duration(after - before); used > 100*time.Millisecond {
				t.Errorf("the idle sandbox used %v of CPU in a second after its terminals' commands ended", used)
			}
		})
	}
}

// TestTTYHangUp: once a command on a terminal has ended, the terminal is
// hung up on both backends, as on Linux: its foreground process group is
// sent SIGHUP when the command (the terminal's controlling process)
// exits, and the terminal is gone from /dev/pts once its exec has ended,
// though a process that ignores SIGHUP still holds it. The namespace
// backend's kernel does the first and the host's closing of the master
// side the second; under gVisor, which signals nothing at the
// controlling process's exit, init does both, the second by ending its
// relay.
func TestTTYHangUp(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			sb := ttySandbox(t, be, 0)
			ty, stdin := newTypist(true)
			defer ty.in.Close()
			r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", `(trap '' HUP; exec sleep 7) & (trap 'echo hup > /tmp/hup' HUP; sleep 5) & sleep 0.5; echo bye`},
				TTY: &WinSize{Rows: 24, Cols: 80}, Stdin: stdin, Stdout: ty, Stderr: ty, Capture: true, KeepAlive: true})
			if r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(ty.output(), "bye") {
				t.Fatalf("the command: %s code %d %q; terminal showed %q", r.Outcome, r.ExitCode, r.Error, ty.output())
			}
			var got string
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				r = sb.Exec(t.Context(), ExecRequest{Argv: []string{"sh", "-c", "cat /tmp/hup; ls /dev/pts; ps -eo args | grep -c '^sleep 7'"}, Capture: true, KeepAlive: true})
				if got = string(r.Stdout); got == "hup\nptmx\n1\n" {
					break
				}
			}
			if want := "hup\nptmx\n1\n"; got != want {
				t.Errorf("after the command's end: %q, want %q (the foreground group's SIGHUP; /dev/pts without the terminal; its holder still running)", got, want)
			}
		})
	}
}
