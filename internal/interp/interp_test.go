package interp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startBridge runs the real bridge on the host's Python (the kernel's
// protocol, not the sandbox, is under test here; internal/daemon runs it
// in sandboxes).
func startBridge(t *testing.T) *Kernel {
	t.Helper()
	k, err := startLanguage(t, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startLanguage runs the real bridge for a context of language in cwd.
func startLanguage(t *testing.T, language, cwd string) (*Kernel, error) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import ipykernel").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s has no ipykernel (the test script installs python3-ipykernel): %v", Python, err)
		}
		t.Skipf("%s has no ipykernel (apt-get install python3-ipykernel): %v", Python, err)
	}
	argv := Argv(language, cwd)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
	// The sandbox signals the command's process group; so does this.
	return New(ctx, in, pr, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) })
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
			// Output comes in chunks as it is read: adjacent ones are
			// joined.
			if n := len(said); n > 0 && strings.HasPrefix(said[n-1], ev.Type+": ") {
				said[n-1] += ev.Text
				break
			}
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
		// Output from below Python comes before the execution's end.
		{"import subprocess; subprocess.run('for i in 1 2 3; do echo $i; sleep 0.01; done', shell=True); None", nil, []string{"stdout: 1\n2\n3\n"}},
		{"None", nil, nil},
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

// TestBridgeBash drives the bridge's bash: state (variables, the working
// directory, functions) kept between executions, output and errors as
// they come, a failing status as an error, per-call environment put back
// as it was, a shell that exits replaced, and an interrupt that ends the
// execution but not the shell.
func TestBridgeBash(t *testing.T) {
	dir := t.TempDir()
	k, err := startLanguage(t, "bash", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		code string
		env  map[string]string
		want []string
	}{
		{"pwd", nil, []string{"stdout: " + dir + "\n"}},
		{"x=5; declare -i y=6; f() { echo called $1; }; mkdir sub && cd sub", nil, nil},
		{"echo $x $y; f it; basename $PWD", nil, []string{"stdout: 5 6\ncalled it\nsub\n"}},
		{"echo oops >&2; false", nil, []string{"stderr: oops\n", "error: ExitCode: 1"}},
		{"echo \"$ONCE $x\"", map[string]string{"ONCE": "it's $once", "x": "shadow"}, []string{"stdout: it's $once shadow\n"}},
		{"echo \"${ONCE-unset} $x\"", nil, []string{"stdout: unset 5\n"}},
		{"read -r line; echo \"[$line]\"", nil, []string{"stdout: []\n"}},
		{"exit 3", nil, []string{"error: ShellExited: the shell exited with status 3; a new one has started, its state is lost"}},
		{"echo ${x-gone}", nil, []string{"stdout: gone\n"}},
	} {
		got, err := run(t, k, tt.code, tt.env)
		if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q %v, want %q", tt.code, got, err, tt.want)
		}
	}
	if _, err := run(t, k, "kept=7", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var said []string
	err = k.Execute(ctx, "sleep 30; echo not reached", nil, func(ev Event) { said = append(said, ev.Type+":"+ev.Name+ev.Text) })
	if !errors.Is(err, context.DeadlineExceeded) || strings.Join(said, " ") != "count: error:KeyboardInterrupt" {
		t.Fatalf("an interrupted execution: %v, said %q", err, said)
	}
	if got, err := run(t, k, "echo $kept", nil); err != nil || strings.Join(got, "") != "stdout: 7\n" {
		t.Errorf("after the interrupt: %q %v", got, err)
	}
}

// TestBridgeStartError: a context whose working directory is not one
// does not start, and says why.
func TestBridgeStartError(t *testing.T) {
	for _, language := range Languages {
		_, err := startLanguage(t, language, "/no/such/dir")
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "/no/such/dir: No such file or directory") {
			t.Errorf("%s: %v, want ErrStart naming the directory", language, err)
		}
	}
}

// TestBridgeRich: the forms E2B's clients read. A matplotlib figure
// comes back as a PNG; a DataFrame as HTML and as its columns
// ("e2b/data"); tracebacks are plain text. Skipped where the host's
// Python lacks pandas or matplotlib (the test script installs both).
func TestBridgeRich(t *testing.T) {
	if err := exec.Command(Python, "-c", "import pandas, matplotlib, matplotlib_inline").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s lacks pandas or matplotlib (the test script installs python3-pandas and python3-matplotlib): %v", Python, err)
		}
		t.Skipf("%s lacks pandas or matplotlib: %v", Python, err)
	}
	k := startBridge(t)
	var got []Event
	on := func(ev Event) { got = append(got, ev) }
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	code := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('t')\nplt.show()"
	if err := k.Execute(ctx, code, nil, on); err != nil {
		t.Fatal(err)
	}
	var png string
	for _, ev := range got {
		if ev.Type == "result" && ev.Data["image/png"] != nil {
			_ = json.Unmarshal(ev.Data["image/png"], &png)
		}
	}
	if b, err := base64.StdEncoding.DecodeString(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("a figure: no PNG result (%v): %v", err, got)
	}
	got = nil
	if err := k.Execute(ctx, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", nil, on); err != nil {
		t.Fatal(err)
	}
	var main Event
	for _, ev := range got {
		if ev.Type == "result" && ev.Main {
			main = ev
		}
	}
	var cols bytes.Buffer
	_ = json.Compact(&cols, main.Data["e2b/data"])
	if cols.String() != `{"a":[1,2],"b":["x","y"]}` || !bytes.Contains(main.Data["text/html"], []byte("<table")) {
		t.Errorf("a DataFrame: %s", main.Data)
	}
	got = nil
	if err := k.Execute(ctx, "def f():\n    raise ValueError('v')\nf()", nil, on); err != nil {
		t.Fatal(err)
	}
	for _, ev := range got {
		if ev.Type == "error" && (strings.Contains(ev.Traceback, "\x1b[") || !strings.Contains(ev.Traceback, "ValueError")) {
			t.Errorf("a traceback with colour codes, or without its error: %q", ev.Traceback)
		}
	}
}

// TestSetEnv: variables set in a running kernel hold for every later
// execution, in both languages, and reach the processes it starts.
func TestSetEnv(t *testing.T) {
	for _, language := range Languages {
		t.Run(language, func(t *testing.T) {
			k, err := startLanguage(t, language, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := k.SetEnv(t.Context(), map[string]string{"GIVEN": "it's $set"}); err != nil {
				t.Fatal(err)
			}
			code := map[string]string{"python": "import subprocess; print(subprocess.run(['sh', '-c', 'echo \"$GIVEN\"'], capture_output=True, text=True).stdout, end='')", "bash": "sh -c 'echo \"$GIVEN\"'"}[language]
			for range 2 {
				if got, err := run(t, k, code, nil); err != nil || strings.Join(got, "") != "stdout: it's $set\n" {
					t.Errorf("%q %v", got, err)
				}
			}
		})
	}
}
