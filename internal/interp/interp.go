// Package interp is the code interpreter's protocol with its kernel: a
// real IPython kernel (ipykernel's in-process kernel) run by a small
// bridge program (bridge.py) inside a session's sandbox, as the sandbox's
// user, under its ceilings and policy, spoken to over the command's pipes
// (requests on its stdin, answers on its stdout). The host trusts
// nothing the bridge says: every line is bounded, parsed into a closed set
// of events, and a bridge that says anything else, too much, or nothing
// for too long is given up on (docs/decisions/0026-code-interpreter.md).
package interp

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// bridge is the program the kernel runs under (Python).
//
//go:embed bridge.py
var bridge string

// Python is the interpreter the bridge runs with in the sandbox.
const Python = "/usr/bin/python3"

// Languages are the languages a context may have, by the name E2B's
// clients give them.
var Languages = []string{"python", "bash"}

// Argv is the command that starts a kernel of language (one of
// Languages) in a sandbox, its working directory cwd ("" keeps the
// command's).
func Argv(language, cwd string) []string {
	return []string{Python, "-Xfrozen_modules=off", "-c", bridge, language, cwd}
}

// Env is what the bridge's command needs in its environment.
func Env() []string {
	return []string{"PYDEVD_DISABLE_FILE_VALIDATION=1", "PYTHONUNBUFFERED=1"}
}

// Bounds on what a bridge may say.
const (
	// MaxLine bounds one line of the bridge's answers: a result's
	// largest payload (a PNG, a table's HTML) fits; a line past it ends
	// the kernel.
	MaxLine = 8 << 20
	// MaxOutput bounds what one execution may say in all.
	MaxOutput = 64 << 20
	// maxStartOutput bounds what a kernel may say before it is ready.
	maxStartOutput = 1 << 20
)

// Event is one thing an execution says, in the order it says it.
type Event struct {
	// Type is "count", "stdout", "stderr", "result" or "error".
	Type string
	// Count is the execution's number (Type "count").
	Count int
	// Text is the output (Type "stdout", "stderr").
	Text string
	// Main says the result is the execution's value, not a display
	// (Type "result"); Data is the result's forms by MIME type.
	Main bool
	Data map[string]json.RawMessage
	// Name, Value and Traceback are the error's (Type "error").
	Name, Value, Traceback string
}

// ErrStart is the failure of a kernel that could not start, as it said
// (a working directory that is not one).
var ErrStart = errors.New("the kernel could not start")

// ErrBroken is the failure of a kernel that said what the protocol does
// not allow (malformed, too long, too much) or stopped saying anything:
// it cannot be used again.
var ErrBroken = errors.New("the kernel broke its protocol")

// InterruptGrace is how long an execution whose caller went away has to
// end once interrupted, before its kernel is given up on. A variable for
// tests.
var InterruptGrace = 10 * time.Second

// ErrOutput is the failure of an execution that said more than its
// kernel's MaxOutput allows (it is also ErrBroken: the kernel is given up).
var ErrOutput = errors.New("the execution's output is over its bound")

// Kernel is one running kernel: one execution at a time.
type Kernel struct {
	// MaxOutput bounds what one execution may say in all (its output,
	// results and error); MaxOutput (the constant) when 0. Set before
	// the first execution.
	MaxOutput int64

	mu     sync.Mutex // held for an execution
	in     io.Writer
	out    *bufio.Reader
	broken error
	// interrupt interrupts the execution in flight (SIGINT to the
	// bridge: a KeyboardInterrupt in the code).
	interrupt func()
}

// New speaks to a kernel whose bridge reads requests from in and answers
// on out; interrupt interrupts its execution in flight. It waits for the
// bridge's "ready", as long as ctx lets it.
func New(ctx context.Context, in io.Writer, out io.Reader, interrupt func()) (*Kernel, error) {
	k := &Kernel{in: in, out: bufio.NewReaderSize(out, 64<<10), interrupt: interrupt}
	said := 0
	for {
		msg, err := k.next(ctx)
		if err != nil {
			return nil, err
		}
		switch msg.Type {
		case "ready":
			return k, nil
		case "error":
			return nil, fmt.Errorf("%w: %s", ErrStart, shorten(valid(msg.Value)))
		case "stdout", "stderr":
			// Python's and IPython's own warnings as they start: not
			// an execution's, and not the caller's.
			if said += len(msg.Text); said <= maxStartOutput {
				continue
			}
		}
		return nil, fmt.Errorf("%w: it said %q before it was ready", ErrBroken, msg.Type)
	}
}

// wire is a line of the bridge, as it is allowed to be.
type wire struct {
	Type      string                     `json:"type"`
	N         int                        `json:"n"`
	Text      string                     `json:"text"`
	Main      bool                       `json:"main"`
	Data      map[string]json.RawMessage `json:"data"`
	Name      string                     `json:"name"`
	Value     string                     `json:"value"`
	Traceback string                     `json:"traceback"`
}

// next reads the bridge's next line. A read that ctx ends is the
// kernel's end too: the line may be half read.
func (k *Kernel) next(ctx context.Context) (wire, error) {
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	go func() {
		b, err := readLine(k.out, MaxLine)
		got <- line{b, err}
	}()
	var l line
	select {
	case l = <-got:
	case <-ctx.Done():
		return wire{}, fmt.Errorf("%w: %w", ErrBroken, context.Cause(ctx))
	}
	if l.err != nil {
		return wire{}, fmt.Errorf("%w: %w", ErrBroken, l.err)
	}
	var w wire
	dec := json.NewDecoder(bytes.NewReader(l.b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return wire{}, fmt.Errorf("%w: a line that is not one of its messages", ErrBroken)
	}
	switch w.Type {
	case "ready", "count", "stdout", "stderr", "result", "error", "end":
	default:
		return wire{}, fmt.Errorf("%w: a message of type %q", ErrBroken, shorten(w.Type))
	}
	return w, nil
}

// errLong is a line past MaxLine.
var errLong = fmt.Errorf("a line over %d bytes", MaxLine)

// readLine reads one line of at most max bytes (without its newline).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var b []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(b)+len(frag) > max+1 {
			return nil, errLong
		}
		b = append(b, frag...)
		switch {
		case err == nil:
			return b[:len(b)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(b) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Execute runs code in the kernel, env set for this execution only, and
// gives each event to on as it comes. It returns once the execution has
// ended. When ctx ends first (the caller went away, its time ran out) the
// execution is interrupted, and the kernel, its state kept, serves the
// next one; Execute then returns ctx's cause once the execution has
// ended. Any other error is ErrBroken: the kernel said what the protocol
// does not allow, or did not end an interrupted execution within
// InterruptGrace; it cannot be used again, and its owner ends it.
func (k *Kernel) Execute(ctx context.Context, code string, env map[string]string, on func(Event)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken != nil {
		return k.broken
	}
	rctx, give := context.WithCancelCause(context.Background())
	defer give(nil)
	stop := context.AfterFunc(ctx, func() {
		if k.interrupt != nil {
			k.interrupt()
		}
		time.AfterFunc(InterruptGrace, func() {
			give(fmt.Errorf("the execution did not end within %v of its interrupt", InterruptGrace))
		})
	})
	defer stop()
	req, err := json.Marshal(map[string]any{"code": code, "env": env})
	if err != nil {
		return err
	}
	if _, err := k.in.Write(append(req, '\n')); err != nil {
		k.broken = fmt.Errorf("%w: %w", ErrBroken, err)
		return k.broken
	}
	bound := k.MaxOutput
	if bound <= 0 {
		bound = MaxOutput
	}
	var said int64
	for {
		w, err := k.next(rctx)
		if err != nil {
			k.broken = err
			return err
		}
		if said += int64(len(w.Text) + len(w.Traceback) + len(w.Value) + dataLen(w.Data)); said > bound {
			k.broken = &OutputError{Bound: bound, Said: said}
			return k.broken
		}
		switch w.Type {
		case "end":
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return nil
		case "ready":
			k.broken = fmt.Errorf("%w: it said ready again", ErrBroken)
			return k.broken
		case "count":
			on(Event{Type: w.Type, Count: w.N})
		case "stdout", "stderr":
			on(Event{Type: w.Type, Text: valid(w.Text)})
		case "result":
			on(Event{Type: w.Type, Main: w.Main, Data: w.Data})
		case "error":
			on(Event{Type: w.Type, Name: valid(w.Name), Value: valid(w.Value), Traceback: valid(w.Traceback)})
		}
	}
}

// OutputError is an execution's output over its kernel's bound: ErrOutput
// and ErrBroken both.
type OutputError struct{ Bound, Said int64 }

func (e *OutputError) Error() string {
	return fmt.Sprintf("%v: an execution said over %d bytes", ErrBroken, e.Bound)
}

func (e *OutputError) Is(target error) bool { return target == ErrOutput || target == ErrBroken }

// SetEnv sets env in the kernel from now on, for every later execution
// (what a sandbox's creator asked for, given to a kernel started before
// it). It waits for the kernel to say it is done, as long as ctx lets it;
// a kernel that says anything else is broken.
func (k *Kernel) SetEnv(ctx context.Context, env map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken != nil {
		return k.broken
	}
	req, err := json.Marshal(map[string]any{"setenv": env})
	if err != nil {
		return err
	}
	if _, err := k.in.Write(append(req, '\n')); err != nil {
		k.broken = fmt.Errorf("%w: %w", ErrBroken, err)
		return k.broken
	}
	said := 0
	for {
		w, err := k.next(ctx)
		if err != nil {
			k.broken = err
			return err
		}
		switch w.Type {
		case "end":
			return nil
		case "stdout", "stderr":
			// Output of a process an earlier execution left running.
			if said += len(w.Text); said <= MaxOutput {
				continue
			}
		}
		k.broken = fmt.Errorf("%w: it said %q to a setenv", ErrBroken, w.Type)
		return k.broken
	}
}

func dataLen(d map[string]json.RawMessage) int {
	n := 0
	for k, v := range d {
		n += len(k) + len(v)
	}
	return n
}

// valid is s with anything that is not UTF-8 replaced.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func shorten(s string) string {
	if len(s) > 256 {
		return strings.ToValidUTF8(s[:256], "") + "..."
	}
	return s
}
