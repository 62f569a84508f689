package interp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startBridge runs the real bridge on the host's Python (the kernel's
// protocol, not the sandbox, is under test here; internal/daemon runs it
// in sandboxes).
func startBridge(t *testing.T) *Kernel {
	t.Helper()
	if err := exec.Command(Python, "-c", "import ipykernel").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s has no ipykernel (the test script installs python3-ipykernel): %v", Python, err)
		}
		t.Skipf("%s has no ipykernel (apt-get install python3-ipykernel): %v", Python, err)
	}
	argv := Argv()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), Env()...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	k, err := New(ctx, in, pr, func() { _ = cmd.Process.Signal(os.Interrupt) })
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// run executes code and returns what it said, each event in a line.
func run(t *testing.T, k *Kernel, code string, env map[string]string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var said []string
	err := k.Execute(ctx, code, env, func(ev Event) {
		switch ev.Type {
		case "count":
		case "stdout", "stderr":
			said = append(said, ev.Type+": "+ev.Text)
		case "result":
			var text string
			_ = json.Unmarshal(ev.Data["text/plain"], &text)
			kind := "display"
			if ev.Main {
				kind = "main"
			}
			said = append(said, "result "+kind+": "+text)
		case "error":
			said = append(said, "error: "+ev.Name+": "+ev.Value)
		}
	})
	return said, err
}

// TestBridge drives the real bridge: state kept between executions, the
// last expression as the main result, display() as another, output from
// Python and from below it, an exception's name and value, and per-call
// environment that does not outlive its call.
func TestBridge(t *testing.T) {
	k := startBridge(t)
	for _, tt := range []struct {
		code string
		env  map[string]string
		want []string
	}{
		{"x = 21", nil, nil},
		{"x * 2", nil, []string{"result main: 42"}},
		{"print('hi')", nil, []string{"stdout: hi\n"}},
		{"import os; os.system('echo below >&2')", nil, []string{"stderr: below\n", "result main: 0"}},
		{"display('shown'); 1/0", nil, []string{"result display: 'shown'", "error: ZeroDivisionError: division by zero"}},
		{"os.environ.get('ONCE')", map[string]string{"ONCE": "yes"}, []string{"result main: 'yes'"}},
		{"os.environ.get('ONCE') is None", nil, []string{"result main: True"}},
	} {
		got, err := run(t, k, tt.code, tt.env)
		if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q %v, want %q", tt.code, got, err, tt.want)
		}
	}
}

// TestHostileBridge: a bridge that says what the protocol does not allow
// breaks its kernel, at once and within bounds, and the kernel refuses
// every later execution; nothing it says reaches the caller as an event
// it could not have been.
func TestHostileBridge(t *testing.T) {
	old := InterruptGrace
	InterruptGrace = 500 * time.Millisecond
	t.Cleanup(func() { InterruptGrace = old })
	for _, tt := range []struct {
		name string
		say  func(w io.Writer)
	}{
		{"not JSON", func(w io.Writer) { io.WriteString(w, "hello\n") }},
		{"an unknown type", func(w io.Writer) { io.WriteString(w, `{"type":"exec","text":"rm -rf /"}`+"\n") }},
		{"an unknown field", func(w io.Writer) { io.WriteString(w, `{"type":"stdout","text":"x","path":"/etc"}`+"\n") }},
		{"ready again", func(w io.Writer) { io.WriteString(w, `{"type":"ready"}`+"\n") }},
		{"a line over the bound", func(w io.Writer) {
			io.WriteString(w, `{"type":"stdout","text":"`)
			chunk := strings.Repeat("x", 1<<20)
			for range MaxLine>>20 + 2 {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		}},
		{"too much in all", func(w io.Writer) {
			line := `{"type":"stdout","text":"` + strings.Repeat("y", 4<<20) + `"}` + "\n"
			for range MaxOutput>>22 + 2 {
				if _, err := io.WriteString(w, line); err != nil {
					return
				}
			}
		}},
		{"its end mid-line", func(w io.Writer) { io.WriteString(w, `{"type":"stdo`) }},
		{"silence", func(w io.Writer) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			defer outW.Close()
			go func() {
				io.WriteString(outW, `{"type":"ready"}`+"\n")
				if _, err := bufio.NewReader(inR).ReadString('\n'); err != nil {
					return
				}
				tt.say(outW)
				if tt.name == "its end mid-line" {
					outW.Close()
				}
			}()
			k, err := New(t.Context(), inW, outR, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			var events int
			err = k.Execute(ctx, "1", nil, func(ev Event) { events++ })
			if !errors.Is(err, ErrBroken) {
				t.Fatalf("Execute: %v, want ErrBroken", err)
			}
			if err2 := k.Execute(t.Context(), "2", nil, func(Event) {}); !errors.Is(err2, ErrBroken) {
				t.Errorf("an execution after the kernel broke: %v", err2)
			}
			if tt.name != "too much in all" && events != 0 {
				t.Errorf("%d events reached the caller", events)
			}
		})
	}
}

// TestBridgeInterrupt: an execution whose caller goes away (or whose
// time runs out) is interrupted, and the kernel, its state kept, runs the
// next one.
func TestBridgeInterrupt(t *testing.T) {
	k := startBridge(t)
	if _, err := run(t, k, "kept = 7", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var said []string
	start := time.Now()
	err := k.Execute(ctx, "import time\nwhile True: time.sleep(0.05)", nil, func(ev Event) { said = append(said, ev.Type+":"+ev.Name) })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("an execution past its caller's time: %v after %v (%v)", err, time.Since(start), said)
	}
	if !strings.Contains(strings.Join(said, " "), "error:KeyboardInterrupt") {
		t.Errorf("the interrupted execution said %v, want a KeyboardInterrupt", said)
	}
	if got, err := run(t, k, "kept * 6", nil); err != nil || strings.Join(got, "") != "result main: 42" {
		t.Errorf("after the interrupt: %q %v", got, err)
	}
}
