package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/initproto"
	"github.com/airlockhq/airlock/result"
)

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// command's PATH inside the sandbox.
	Argv []string
	// Env is added to DefaultEnv, overriding names it already has.
	Env []string
	// Dir is the working directory inside; default /workspace.
	Dir string
	// Stdin is copied to the command's standard input; nil means empty.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive output live. When a write to
	// one fails, that stream is closed towards the command too, which then
	// sees a broken pipe as it would outside.
	Stdout, Stderr io.Writer
	// Capture keeps output in the result.
	Capture bool
	// TTY, when set, gives the command a pseudo-terminal of the
	// sandbox's own, of this size, as its stdin, stdout, stderr and
	// controlling terminal, as a terminal emulator or sshd would. Output
	// is then one stream, on Stdout (and the result's Stdout); Stdin is
	// what is typed, and its end is typed as a Ctrl-D (a nil Stdin at
	// once); Resize changes the size while the command runs. The
	// ceilings, the output one too, are those of any command.
	TTY *WinSize
	// Resize carries the window size changes of a command with a TTY.
	Resize <-chan WinSize
	// Signal carries signals for the command and its process group (a
	// kill, an interrupt, a lifetime of its own that ran out): the
	// sandbox goes on, unlike when ctx ends. A command that has ended
	// ignores them.
	Signal <-chan unix.Signal
	// OnEvent, when set, receives output chunks and samples live. It must
	// not block for long.
	OnEvent func(result.Event)
	// SampleEvery is the sampling interval for evidence; default 250ms.
	SampleEvery time.Duration
	// KeepAlive leaves the sandbox running after the command ends (for
	// sessions). By default the sandbox is killed when the command ends,
	// so that nothing it started outlives it.
	KeepAlive bool
	// Resident marks a command that serves its sandbox's session for as
	// long as the session lasts, doing work in units of its own (a code
	// interpreter's kernel, each execution a unit): the ceilings of one
	// command (time, output, CPU time) do not apply to it as a whole,
	// and whoever runs it bounds each unit by them (internal/node). The
	// sandbox's own ceilings (memory, processes, disk, descriptors) hold
	// as for any command.
	Resident bool

	// prewarm marks Prewarm's command: the sandbox's socket watch is not
	// started for it.
	prewarm bool
}

// WinSize is a terminal's size in characters; 0 is unknown.
type WinSize struct{ Rows, Cols uint16 }

const (
	defaultSampleEvery = 250 * time.Millisecond
	// checkEvery is how often ceilings are checked while a command runs;
	// residentCheckEvery while a resident one does.
	checkEvery         = 10 * time.Millisecond
	residentCheckEvery = 100 * time.Millisecond
	// evidenceKept is how many samples the result carries.
	evidenceKept = 8
	// drainGrace is how long output from background processes may keep
	// arriving after the command ends when the sandbox is kept alive.
	drainGrace = 100 * time.Millisecond
	// directFirstCheck is when the ceilings are first checked for a
	// one-command gVisor sandbox's command, which starts once runsc has
	// made the sandbox (50-60 ms on a 2-core VM): checks before it would
	// read nothing of the command's, at half a millisecond of the host's
	// CPU each. The kernel enforces every ceiling meanwhile; a breach is
	// named at the first check, or by the last look at the command's end.
	directFirstCheck = 50 * time.Millisecond
)

// ErrDead is returned for a sandbox that can no longer run commands. It
// belongs to errdefs.ErrConflict.
var ErrDead = errdefs.New(errdefs.ErrConflict, "sandbox is no longer running")

// Exec runs one command and returns its result; it never returns nil. A
// breach of any ceiling kills the whole sandbox and yields outcome limit.
// On a sandbox from Start whose init is not ready yet, the request goes to
// init at once and Exec waits for ready; a setup that fails is the
// result's error.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) *result.Result {
	r := &result.Result{SandboxID: s.id}
	if req.Dir == "" {
		req.Dir = HomeDir
	}
	if err := req.validate(); err != nil {
		return errResult(r, err)
	}
	if req.SampleEvery <= 0 {
		req.SampleEvery = defaultSampleEvery
	}
	x, err := s.newExec(req, s.launchFor(&req))
	if err != nil {
		return errResult(r, err)
	}
	defer s.execs.Done()
	// A sandbox from Start may still be starting: the request is queued
	// to init already, and runs once init is ready. The time ceiling
	// bounds the whole attempt, the wait for the setup included: a setup
	// that outlasts it is a breach of it, and the sandbox is destroyed.
	x.began = time.Now()
	x.pausedBefore = s.pausedFor()
	wctx, cancel := context.WithTimeoutCause(ctx, s.ceilings().Time, errSetupTime)
	err = s.awaitStart(wctx)
	cancel()
	if err != nil {
		x.closeHostEnds()
		x.unregister()
		if ctx.Err() == nil && context.Cause(wctx) == errSetupTime {
			s.kill()
			r.Outcome = result.LimitExceeded
			r.Limit = &result.Limit{Name: result.LimitTime, Ceiling: s.ceilings().Time.Milliseconds(), Observed: time.Since(x.began).Milliseconds(), Unit: result.UnitMillis}
			return r
		}
		if lim := s.startBreach(); lim != nil {
			s.kill()
			r.Outcome, r.Limit = result.LimitExceeded, lim
			return r
		}
		return errResult(r, err)
	}
	return x.run(ctx, r)
}

// startBreach is the memory or pids breach that ended a start, if any.
// A command queued while init starts runs as soon as init is ready, and
// may breach its limits before the host has finished the setup (an
// out-of-memory kill that takes init with it leaves no root to open):
// the setup's failure is then the breach's doing, and the breach is the
// result.
func (s *Sandbox) startBreach() *result.Limit {
	c, err := s.group.Counters()
	if err != nil {
		return nil
	}
	l := s.ceilings()
	switch {
	case c.OOMKills > 0:
		return &result.Limit{Name: result.LimitMemory, Ceiling: l.Memory, Observed: max(c.MemoryPeakBytes, c.MemoryBytes), Unit: result.UnitBytes}
	case c.PidsMaxEvents > 0:
		return &result.Limit{Name: result.LimitPids, Ceiling: l.Pids, Observed: max(c.PidsPeak, c.Pids, l.Pids), Unit: result.UnitCount}
	}
	return nil
}

// errSetupTime is the cause of a wait for setup cut short by the time
// ceiling.
var errSetupTime = errors.New("setup outlasted the time ceiling")

// validate refuses requests the kernel would reject in confusing ways.
func (req *ExecRequest) validate() error {
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return fmt.Errorf("%w: empty command", ErrInvalid)
	case !strings.HasPrefix(req.Dir, "/"):
		return fmt.Errorf("%w: working directory %q is not absolute", ErrInvalid, req.Dir)
	case strings.ContainsRune(req.Dir, 0):
		return fmt.Errorf("%w: working directory contains a NUL byte", ErrInvalid)
	}
	for i, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: argument %d contains a NUL byte", ErrInvalid, i)
		}
	}
	for _, kv := range req.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return fmt.Errorf("%w: environment entry %q is not NAME=VALUE", ErrInvalid, kv)
		case strings.ContainsRune(kv, 0):
			return fmt.Errorf("%w: environment entry for %q contains a NUL byte", ErrInvalid, k)
		}
	}
	return nil
}

func errResult(r *result.Result, err error) *result.Result {
	r.Outcome = result.Error
	r.Error = err.Error()
	return r
}

// execution is the state of one running command.
type execution struct {
	s    *Sandbox
	req  ExecRequest
	id   uint64
	msgs chan initReply
	// began is when Exec was called, start when the command started:
	// the time ceiling counts from began (a setup still running is part
	// of the attempt), the command's wall time from start.
	began, start time.Time
	// pausedBefore is how long the sandbox had been paused when the
	// command began: the time ceiling leaves out pauses after it.
	pausedBefore time.Duration

	// The host's ends of the command's stdin, stdout and stderr; or
	// for a command with a terminal, none of them and pty, the terminal's
	// master side once init has sent it (ptyc hands it to the pump).
	stdinW           *os.File
	stdoutR, stderrR *os.File
	pty              *os.File
	ptyc             chan *os.File
	// relayed is a command with a terminal under gVisor: init keeps the
	// terminal and relays it through the three pipes (see
	// initproto.Exec.TTY); its output is the stdout pipe alone.
	relayed bool
	out     *outputCounter

	// base is the group's CPU time when the command started: set before
	// the monitor starts, only read after.
	base cpuBase

	// mu guards breach, samples and usage: the monitor, the output pumps
	// and run all update them. breached is closed under it, with breach
	// set.
	mu sync.Mutex
	// breach is the first ceiling found breached, and postMortem what
	// explains it; breaching is set once a breach is being handled.
	breach     *result.Limit
	postMortem *result.PostMortem
	breaching  bool
	breached   chan struct{}
	samples    []result.Sample
	usage      result.Usage
}

type cpuBase struct{ nanos int64 }

// newExec sends req to init, or with launch (a one-command gVisor
// sandbox's, see launchFor), starts the sandbox with req's command as its
// container's process.
func (s *Sandbox) newExec(req ExecRequest, launch *gvisorLaunch) (_ *execution, err error) {
	if launch != nil {
		// Whatever becomes of the request, the launch is over.
		defer func() {
			if launch != nil {
				s.dropLaunch(launch)
			}
		}()
	}
	s.mu.Lock()
	killed, frozen := s.killed, s.frozen
	if !killed && !frozen {
		// Counted under mu: once Destroy has set killed, it waits for
		// every exec counted before.
		s.execs.Add(1)
	}
	s.mu.Unlock()
	switch {
	case killed:
		return nil, ErrDead
	case frozen:
		// Init is frozen: the command would wait, unseen, for a resume.
		return nil, ErrPaused
	}
	defer func() {
		if err != nil {
			s.execs.Done()
		}
	}()
	select {
	case <-s.dead:
		return nil, ErrDead
	default:
	}
	x := &execution{s: s, req: req, msgs: make(chan initReply, 2), breached: make(chan struct{})}
	// The sandbox's ends leave with the request; the host keeps its own.
	// A command with a terminal has none: init opens the terminal.
	var sbEnds []int
	defer func() {
		for _, fd := range sbEnds {
			unix.Close(fd)
		}
	}()
	// Init opens a terminal in the sandbox and passes its master side
	// out; gVisor passes no descriptor of the guest's to the host, so
	// there init keeps it and relays it through the pipes.
	x.relayed = req.TTY != nil && s.gv != nil
	if req.TTY != nil && !x.relayed {
		x.ptyc = make(chan *os.File, 1)
	} else {
		var hostEnds []*os.File
		for _, name := range []string{"stdin", "stdout", "stderr"} {
			h, sb, err := sandboxPipe(name)
			if err != nil {
				for _, f := range hostEnds {
					f.Close()
				}
				return nil, err
			}
			hostEnds, sbEnds = append(hostEnds, h), append(sbEnds, sb)
		}
		x.stdinW, x.stdoutR, x.stderrR = hostEnds[0], hostEnds[1], hostEnds[2]
	}

	// dead is closed under mu, with every waiter then registered: a
	// waiter registered after that would never be released, and the
	// exec would wait out its time limit as if it were a breach.
	s.mu.Lock()
	select {
	case <-s.dead:
		s.mu.Unlock()
		x.closeHostEnds()
		return nil, ErrDead
	default:
	}
	s.nextID++
	x.id = s.nextID
	s.waiters[x.id] = x.msgs
	s.mu.Unlock()

	env := mergeEnv(DefaultEnv, req.Env)
	m := &initproto.Message{Kind: initproto.KindExec, ID: x.id, Exec: &initproto.Exec{Argv: req.Argv, Env: env, Dir: req.Dir}}
	if t := req.TTY; t != nil {
		m.Exec.TTY, m.Exec.Rows, m.Exec.Cols = true, t.Rows, t.Cols
	}
	if launch != nil {
		// The bound init's messages have, for the same commands on
		// either path.
		n := 0
		for _, a := range append(slices.Clip(req.Argv), env...) {
			n += len(a) + 1
		}
		if n > initproto.MaxMessage {
			x.closeHostEnds()
			x.unregister()
			return nil, fmt.Errorf("%w: command line and environment exceed %d KiB", ErrInvalid, initproto.MaxMessage>>10)
		}
		l := launch
		launch = nil // startDirect ends it
		if err := s.startDirect(l, x.id, &directCmd{argv: req.Argv, env: env, dir: req.Dir, stdio: [3]int{sbEnds[0], sbEnds[1], sbEnds[2]}}); err != nil {
			x.closeHostEnds()
			x.unregister()
			return nil, err
		}
		return x, nil
	}
	if err := s.conn.Send(m, sbEnds); err != nil {
		x.closeHostEnds()
		x.unregister()
		if errors.Is(err, initproto.ErrTooLarge) {
			return nil, fmt.Errorf("%w: command line and environment exceed %d KiB", ErrInvalid, initproto.MaxMessage>>10)
		}
		return nil, fmt.Errorf("%w: %w", ErrDead, err)
	}
	return x, nil
}

// sandboxPipe makes a pipe for one of a command's standard streams: the
// host's end (the write end for stdin) on the Go poller, the sandbox's a
// plain blocking descriptor. Made non-blocking at once, only the
// sandbox's end needs a flag change, and it never enters the poller.
func sandboxPipe(name string) (host *os.File, sandbox int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, -1, fmt.Errorf("pipe: %w", err)
	}
	h, sb := p[0], p[1]
	if name == "stdin" {
		h, sb = p[1], p[0]
	}
	if _, err := unix.FcntlInt(uintptr(sb), unix.F_SETFL, 0); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(h), name), sb, nil
}

func (x *execution) unregister() {
	x.s.mu.Lock()
	delete(x.s.waiters, x.id)
	x.s.mu.Unlock()
	// A terminal that came with a message nobody took.
	for {
		select {
		case m, ok := <-x.msgs:
			if ok {
				closeFile(m.pty)
				continue
			}
		default:
		}
		return
	}
}

func (x *execution) closeHostEnds() {
	for _, f := range []*os.File{x.stdinW, x.stdoutR, x.stderrR, x.pty} {
		closeFile(f)
	}
}

// mergeEnv returns base with over applied; later entries win.
func mergeEnv(base, over []string) []string {
	idx := make(map[string]int, len(base)+len(over))
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range append(append([]string{}, base...), over...) {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// setBreach records the first breach and kills the sandbox at once.
func (x *execution) setBreach(l *result.Limit) {
	x.mu.Lock()
	first := x.breach == nil && !x.breaching
	x.breaching = true
	x.mu.Unlock()
	if !first {
		return
	}
	// What explains the breach is read before the sandbox is killed
	// (bounded: postMortemBudget), and set with the breach, so that the
	// result has both.
	pm := x.s.postMortem(l)
	x.mu.Lock()
	x.breach, x.postMortem = l, pm
	close(x.breached)
	x.mu.Unlock()
	x.s.kill()
}

func (x *execution) run(ctx context.Context, r *result.Result) *result.Result {
	s := x.s
	defer x.unregister()
	s.running.Add(1)
	defer s.running.Add(-1)
	x.start = time.Now()
	if n, err := s.group.CPUUsage(); err == nil {
		x.base.nanos = n
	}
	x.out = &outputCounter{x: x, limit: s.ceilings().Output}
	if x.req.Resident {
		x.out.limit = math.MaxInt64
	}
	var wg sync.WaitGroup
	// pumping counts the pumps still reading; wg waits for them.
	var pumping atomic.Int32
	pump := func(f *os.File, kind string, live io.Writer) {
		pumping.Add(1)
		wg.Add(1)
		go func() {
			defer pumping.Add(-1)
			defer wg.Done()
			if f == nil {
				// The terminal, once init has sent it.
				if f = <-x.ptyc; f == nil {
					return
				}
			}
			x.out.pump(f, kind, live)
		}()
	}
	switch {
	case x.req.TTY != nil && !x.relayed:
		pump(nil, result.EventStdout, x.req.Stdout)
	case x.relayed:
		pump(x.stdoutR, result.EventStdout, x.req.Stdout)
		pump(x.stderrR, result.EventStderr, x.req.Stderr) // closed by init at once
		go x.feedRelay()
	default:
		pump(x.stdoutR, result.EventStdout, x.req.Stdout)
		pump(x.stderrR, result.EventStderr, x.req.Stderr)
		if x.req.Stdin == nil {
			x.stdinW.Close() // empty: no goroutine to copy nothing
		} else {
			go x.feedStdin()
		}
	}

	// The monitor starts at its first check: a command that ends before
	// then (most) costs no goroutine or ticker for it.
	monCtx, stopMon := context.WithCancel(ctx)
	monDone := make(chan struct{})
	firstCheck := checkEvery
	if s.gv != nil && s.gv.direct {
		// The command is runsc's container: nothing of it runs before
		// runsc has made its sandbox (see directFirstCheck).
		firstCheck = directFirstCheck
	}
	mon := time.AfterFunc(firstCheck, func() { defer close(monDone); x.monitor(monCtx) })

	timer := time.NewTimer(s.ceilings().Time - time.Since(x.began))
	defer timer.Stop()
	if x.req.Resident {
		timer.Stop()
	}
	var exit *initproto.Message
	var runErr error
wait:
	for {
		select {
		case rep, ok := <-x.msgs:
			if !ok {
				// Init is gone: killed for a breach, or died.
				if x.getBreach() == nil {
					runErr = s.deathCause()
				}
				break wait
			}
			if rep.pty != nil {
				if err := x.takePTY(rep.pty); err != nil {
					runErr = err
					s.kill()
					break wait
				}
			}
			if m := rep.m; m.Kind == initproto.KindExit {
				exit = m
				break wait
			}
		case sig := <-x.req.Signal:
			if err := s.conn.Send(&initproto.Message{Kind: initproto.KindSignal, ID: x.id, Signal: int(sig)}, nil); err != nil && x.getBreach() == nil {
				runErr = fmt.Errorf("%w: %w", ErrDead, err)
				s.kill()
				break wait
			}
		case ws := <-x.req.Resize:
			switch {
			case x.pty != nil:
				_ = x.setSize(ws)
			case x.relayed:
				// Init sets it on the terminal it relays; a sandbox
				// gone is told by the command's end.
				_ = s.conn.Send(&initproto.Message{Kind: initproto.KindResize, ID: x.id, Rows: ws.Rows, Cols: ws.Cols}, nil)
			}
		case <-x.breached:
			break wait
		case <-timer.C:
			// The ceiling counts the time the sandbox ran: a pause
			// since began moves the deadline on by its length.
			ran := time.Since(x.began) - (s.pausedFor() - x.pausedBefore)
			if left := s.ceilings().Time - ran; left > 0 {
				timer.Reset(left)
				continue
			}
			x.setBreach(&result.Limit{Name: result.LimitTime, Ceiling: s.ceilings().Time.Milliseconds(), Observed: ran.Milliseconds(), Unit: result.UnitMillis})
		case <-ctx.Done():
			runErr = context.Cause(ctx)
			s.kill()
			break wait
		}
	}
	wall := time.Since(x.start)
	if x.ptyc != nil && x.pty == nil {
		close(x.ptyc) // no terminal came: its pump ends
	}
	// The command has ended; a last look catches a breach that ended it
	// (an OOM kill of a child, a full disk) before anything is torn down.
	stopMon()
	if !mon.Stop() {
		<-monDone // it started, and ends with monCtx
	}
	// One reading serves both.
	if c, err := s.group.Counters(); err == nil {
		d, dok := x.disk()
		if x.getBreach() == nil {
			x.checkReading(c, true, d, dok, false)
		}
		x.keepSample(c, d, dok)
	} else if x.getBreach() == nil {
		x.check(false)
	}
	switch {
	case (!x.req.KeepAlive || x.getBreach() != nil || runErr != nil) && pumping.Load() == 0:
		// The output is complete, so the result waits for nothing the
		// kill brings: no exec may start from now on, and the signal
		// (tens of microseconds: the kernel wakes each of init's
		// threads) goes out on a goroutine of its own, counted as an
		// exec so that Destroy waits for it.
		s.mu.Lock()
		s.killed = true
		s.execs.Add(1) // this exec's own count is still held
		s.mu.Unlock()
		go func() {
			defer s.execs.Done()
			s.kill()
		}()
	case !x.req.KeepAlive || x.getBreach() != nil || runErr != nil:
		// Killing init makes the kernel kill everything left in the
		// sandbox, so the output pipes reach EOF once the last writer is
		// gone. Waiting for the pid namespace to be torn down is left to
		// Destroy: the result does not depend on it.
		s.kill()
		wg.Wait()
	default:
		x.drain(&wg)
		// What the command left running is read between commands.
		if !x.req.prewarm {
			s.watchOnce.Do(func() { go s.watchSockets() })
		}
	}
	x.closeHostEnds()

	x.mu.Lock()
	defer x.mu.Unlock()
	r.Usage = x.usage
	r.Usage.WallMillis = wall.Milliseconds()
	r.Evidence = append([]result.Sample(nil), x.samples...)
	r.Stdout, r.Stderr, r.Truncated = x.out.result()
	switch {
	case x.breach != nil:
		r.Outcome = result.LimitExceeded
		r.Limit, r.PostMortem = x.breach, x.postMortem
	case runErr != nil:
		return errResult(r, runErr)
	case exit.Errno != 0 && x.req.TTY != nil && x.pty == nil && (!x.relayed || strings.HasPrefix(exit.Error, initproto.PTYFailed)):
		// Init could not open the terminal (all PtyMax in use, say).
		return errResult(r, fmt.Errorf("sandbox: %s", exit.Error))
	case exit.Errno != 0:
		// The command could not be started; report it as a shell does.
		r.Outcome, r.ExitCode = result.Exited, 126
		if exit.Errno == int(unix.ENOENT) {
			r.ExitCode = 127
		}
	default:
		ws := unix.WaitStatus(exit.Status)
		switch {
		case ws.Exited():
			r.Outcome, r.ExitCode = result.Exited, ws.ExitStatus()
		case ws.Signaled():
			r.Outcome, r.Signal = result.Signaled, int(ws.Signal())
		default:
			return errResult(r, fmt.Errorf("unexpected wait status %#x", exit.Status))
		}
	}
	return r
}

func (x *execution) getBreach() *result.Limit {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.breach
}

// drain waits briefly for background processes to finish writing, then
// stops reading their output.
func (x *execution) drain(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainGrace):
		for _, f := range []*os.File{x.stdoutR, x.stderrR, x.pty} {
			if f != nil {
				f.SetReadDeadline(time.Now())
			}
		}
		<-done
	}
}

// takePTY takes the terminal init sent for this command: checked, handed
// to the output pump, given the typed input, and kept for window size
// changes. A descriptor the command did not ask for, a second one, or one
// that is not a terminal's master side, is init misbehaving.
func (x *execution) takePTY(f *os.File) error {
	if x.ptyc == nil || x.pty != nil {
		f.Close()
		return fmt.Errorf("%w: init sent a terminal the command did not ask for", ErrDead)
	}
	if err := initproto.PTYMaster(f); err != nil {
		f.Close()
		return fmt.Errorf("%w: %v", ErrDead, err)
	}
	x.pty = f
	x.ptyc <- f
	go x.feedPTY(f)
	return nil
}

// feedPTY types Stdin into the terminal; its end is typed as the
// terminal's end-of-file character (Ctrl-D), as a user would. The
// terminal stays open: closing it would hang the command up.
func (x *execution) feedPTY(f *os.File) {
	if x.req.Stdin != nil {
		if _, err := io.Copy(f, x.req.Stdin); err != nil {
			return // the terminal went away
		}
	}
	_, _ = f.Write([]byte{ctrlD})
}

// feedRelay types Stdin into a terminal init relays, and its end as a
// Ctrl-D, as feedPTY does. The pipe stays open until the command's end:
// closing it would end what init types, not the terminal.
func (x *execution) feedRelay() {
	if x.req.Stdin != nil {
		if _, err := io.Copy(x.stdinW, x.req.Stdin); err != nil {
			return // the command has ended
		}
	}
	_, _ = x.stdinW.Write([]byte{ctrlD})
}

// ctrlD is a terminal's default end-of-file character (VEOF).
const ctrlD = 0x04

// setSize sets the window size of the command's terminal; the kernel
// signals SIGWINCH to the terminal's foreground process group.
func (x *execution) setSize(ws WinSize) error {
	rc, err := x.pty.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	}); err != nil {
		return err
	}
	return ierr
}

func (x *execution) feedStdin() {
	defer x.stdinW.Close()
	if x.req.Stdin == nil {
		return
	}
	// Errors end the copy: the command closed its stdin or ended.
	_, _ = io.Copy(x.stdinW, x.req.Stdin)
}

// outputCounter enforces the output ceiling across stdout and stderr.
type outputCounter struct {
	x     *execution
	limit int64

	// mu guards total, truncated, stdout and stderr: the two pumps
	// deliver at once.
	mu        sync.Mutex
	total     int64
	truncated bool
	stdout    []byte
	stderr    []byte
}

func (o *outputCounter) pump(f *os.File, kind string, live io.Writer) {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	for {
		n, err := f.Read(buf)
		if n > 0 && !o.deliver(kind, buf[:n], live) {
			// Whoever reads the live output has gone: pass the broken
			// pipe on, so the command's next write fails as it would
			// outside a sandbox.
			f.Close()
			return
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				o.rest(f, kind, live, buf)
			}
			return
		}
	}
}

// pumpBufs are the pumps' read buffers: two a run, 32 KiB each, were
// most of what a run allocated. deliver copies what it keeps, and a live
// writer may not keep what it is given (io.Writer), so a buffer is free
// again once its pump returns.
var pumpBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// maxRest bounds what rest reads: more than a pipe can hold (1 MiB at
// most, /proc/sys/fs/pipe-max-size's default).
const maxRest = 2 << 20

// rest reads what f holds already once drain's deadline has passed. The
// poller checks a deadline before it reads, so without this, output the
// command wrote before it ended, which the pump had not got to yet (a
// loaded host), would be dropped, and the command seen to print nothing.
// Each read is non-blocking: what a background process writes later is
// not waited for.
func (o *outputCounter) rest(f *os.File, kind string, live io.Writer, buf []byte) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < maxRest; {
		var n int
		var rerr error
		if rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true // never wait for more
		}) != nil || rerr != nil || n <= 0 {
			return
		}
		total += n
		if !o.deliver(kind, buf[:n], live) {
			f.Close()
			return
		}
	}
}

// deliver hands b on; it reports false when the live writer failed.
func (o *outputCounter) deliver(kind string, b []byte, live io.Writer) bool {
	o.mu.Lock()
	attempted := o.total + int64(len(b))
	room := o.limit - o.total
	over := int64(len(b)) > room
	if over {
		b = b[:max(room, 0)]
		o.truncated = true
	}
	o.total += int64(len(b))
	if o.x.req.Capture {
		if kind == result.EventStdout {
			o.stdout = append(o.stdout, b...)
		} else {
			o.stderr = append(o.stderr, b...)
		}
	}
	o.mu.Unlock()
	ok := true
	if len(b) > 0 {
		if live != nil {
			_, err := live.Write(b)
			ok = err == nil
		}
		if o.x.req.OnEvent != nil {
			o.x.req.OnEvent(result.Event{Type: kind, Millis: time.Since(o.x.start).Milliseconds(), Data: append([]byte(nil), b...)})
		}
	}
	if over {
		o.x.setBreach(&result.Limit{Name: result.LimitOutput, Ceiling: o.limit, Observed: attempted, Unit: result.UnitBytes})
	}
	return ok
}

func (o *outputCounter) result() (stdout, stderr []byte, truncated bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout, o.stderr, o.truncated
}
