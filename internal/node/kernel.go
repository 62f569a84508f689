package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/interp"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// A code interpreter's kernel (internal/interp; decision 0026) is a
// command in a sandbox, spoken to over its pipes. A session's kernel is
// started when its context is first used (StartKernel: a run of the
// session, recorded), or, for a tool whose pool names kernels, while the
// pooled sandbox waits for its claim (prestart): the claim then finds it
// running, and the session takes it (Session.TakeKernel). A kernel
// started ahead runs no code of anyone's before its claim; the
// environment of its session (the egress gateway's and broker's
// variables, the caller's) is given to it at the claim.

// kernelStart bounds a kernel's start, to its bridge's "ready".
const kernelStart = 60 * time.Second

// Kernel is a code interpreter's kernel running in a sandbox.
type Kernel struct {
	*interp.Kernel
	// Language is the kernel's: one of interp.Languages.
	Language string

	signal chan unix.Signal
	// stdin and stdout are the host's ends of the command's pipes.
	stdin  *io.PipeWriter
	stdout *io.PipeReader
	done   chan struct{} // closed once its command has ended
	// end is how its command ended, once done is closed (nil: airlock's
	// own failure).
	end *result.Result
	// why, when set before kill, is why the kernel was ended on purpose
	// (a restart, a delete), which an execution in flight is told.
	why atomic.Pointer[interp.Event]
	// s is the session whose kernel it is, once it has one; limits are
	// its tool's ceilings, which bound each execution (Execute).
	s      atomic.Pointer[Session]
	limits sandbox.Limits
	// sb is the sandbox it runs in, whose CPU time bounds an execution.
	sb *sandbox.Sandbox
}

// LimitError is an execution that breached a ceiling of one command: its
// sandbox is destroyed and its session ended. Limit names the ceiling.
type LimitError struct{ Limit result.Limit }

func (e *LimitError) Error() string {
	return "the sandbox breached its " + e.Limit.String() + " and was destroyed"
}

// Execute runs code in the kernel (interp.Kernel.Execute) as one unit of
// its work, under the ceilings of one command (the kernel's command is
// resident, not bound by them as a whole): what it says in all (output,
// results, its error) by the output ceiling, how long it runs by the time
// ceiling, the CPU time the sandbox spends meanwhile by the CPU-time
// budget (checked every cpuCheckEvery). A breach destroys the sandbox, as
// any command's would (its session ends with the limit), and Execute
// returns a *LimitError.
func (k *Kernel) Execute(ctx context.Context, code string, env map[string]string, on func(interp.Event)) error {
	var breach atomic.Pointer[result.Limit]
	start := time.Now()
	timer := time.AfterFunc(k.limits.Time, func() {
		breach.CompareAndSwap(nil, &result.Limit{Name: result.LimitTime, Ceiling: k.limits.Time.Milliseconds(), Observed: time.Since(start).Milliseconds(), Unit: result.UnitMillis})
		k.breached(result.LimitTime)
	})
	stopCPU := k.watchCPU(&breach)
	err := k.Kernel.Execute(ctx, code, env, on)
	timer.Stop()
	stopCPU()
	var over *interp.OutputError
	if errors.As(err, &over) {
		breach.CompareAndSwap(nil, &result.Limit{Name: result.LimitOutput, Ceiling: over.Bound, Observed: over.Said, Unit: result.UnitBytes})
		k.breached(result.LimitOutput)
	}
	if l := breach.Load(); l != nil {
		return &LimitError{Limit: *l}
	}
	return err
}

// endWith kills the kernel when s starts to end: its output, which
// nobody reads between executions (a thread of the code that keeps
// printing), must not hold its command, which the session's end waits
// for.
func (k *Kernel) endWith(s *Session) {
	select {
	case <-s.ending:
		k.Kill()
	case <-k.done:
	}
}

// cpuCheckEvery is how often an execution's CPU time is checked against
// the budget.
const cpuCheckEvery = 50 * time.Millisecond

// watchCPU checks, while an execution runs, the sandbox's CPU time since
// it began against the CPU-time budget, and breaches it when spent; stop
// ends the watch. No budget, no watch.
func (k *Kernel) watchCPU(breach *atomic.Pointer[result.Limit]) (stop func()) {
	if k.limits.CPUTime <= 0 || k.sb == nil {
		return func() {}
	}
	base, err := k.sb.Sample()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(cpuCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			smp, err := k.sb.Sample()
			if err != nil {
				return
			}
			if used := smp.CPUMillis - base.CPUMillis; used >= k.limits.CPUTime.Milliseconds() {
				breach.CompareAndSwap(nil, &result.Limit{Name: result.LimitCPU, Ceiling: k.limits.CPUTime.Milliseconds(), Observed: used, Unit: result.UnitMillis})
				k.breached(result.LimitCPU)
				return
			}
		}
	}()
	return func() { close(done) }
}

// breached destroys the kernel's sandbox for a breach of limit: its
// session ends with it, and returns once it has. The kernel is killed
// first, its pipes closed: output nobody reads any more must not hold
// its command, which the session's end waits for.
func (k *Kernel) breached(limit string) {
	s := k.s.Load()
	if s != nil {
		// The session is marked ended before the kernel is killed:
		// Execute returns once the kernel dies, and its caller, told of
		// the breach, must find the session ended, not still active.
		s.startEnd(context.Background(), "limit: "+limit)
	}
	k.Kill()
	if s != nil {
		_ = s.End(context.Background(), "limit: "+limit)
	}
}

// ErrKernel is the failure of a kernel that would not start for a reason
// of the sandbox's (its image lacks the kernel's programs).
var ErrKernel = errors.New("the kernel did not start")

// Done is closed once the kernel's command has ended.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// Dead reports whether the kernel's command has ended.
func (k *Kernel) Dead() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// End is how the kernel's command ended, once Done is closed; nil for
// airlock's own failure.
func (k *Kernel) End() *result.Result { return k.end }

// Why is why the kernel was ended on purpose (EndFor), or nil.
func (k *Kernel) Why() *interp.Event { return k.why.Load() }

// Kill ends the kernel's command. Its pipes close too: the command's
// output, no longer read, must not hold its exec (and the session's end,
// which waits for it) on a write that would never finish.
func (k *Kernel) Kill() {
	select {
	case k.signal <- unix.SIGKILL:
	default:
	}
	_ = k.stdout.CloseWithError(interp.ErrBroken)
	_ = k.stdin.Close()
}

// EndFor ends the kernel on purpose, an execution in flight told why,
// and waits (up to 5 s) for its command to end.
func (k *Kernel) EndFor(why interp.Event) {
	k.why.Store(&why)
	k.Kill()
	select {
	case <-k.done:
	case <-time.After(5 * time.Second):
	}
}

// launch starts a kernel of language in cwd with exec, which runs the
// command x (filled in here) and returns how it ended, and waits for it
// to be ready, as long as ctx and kernelStart let it.
func launch(ctx context.Context, sb *sandbox.Sandbox, language, cwd string, limits sandbox.Limits, x sandbox.ExecRequest, exec func(sandbox.ExecRequest) *result.Result) (*Kernel, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	k := &Kernel{Language: language, signal: make(chan unix.Signal, 1), stdin: inW, stdout: outR, done: make(chan struct{}), limits: limits, sb: sb}
	x.Argv = interp.Argv(language, cwd)
	x.KeepAlive, x.Resident = true, true
	x.Env = append(interp.Env(), x.Env...)
	x.Stdin, x.Stdout, x.Stderr, x.Signal = inR, outW, io.Discard, k.signal
	go func() {
		k.end = exec(x)
		_ = outW.CloseWithError(io.EOF)
		_ = inR.Close()
		close(k.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, kernelStart)
	defer cancel()
	kk, err := interp.New(ctx, inW, outR, func() {
		select {
		case k.signal <- unix.SIGINT:
		default:
		}
	})
	if err != nil {
		k.Kill()
		<-k.done
		return nil, err
	}
	kk.MaxOutput = limits.Output
	k.Kernel = kk
	return k, nil
}

// StartKernel starts a kernel of language in cwd ("" for the tool's
// working directory) as a command of s, for client: a run of the
// session, recorded, with env added to its environment. It lives until
// it is killed, breaks, or the session ends; ctx bounds only its start.
// The errors: ErrGone (the session has ended), interp.ErrStart (the
// kernel said why it could not start), ErrKernel.
func (n *Node) StartKernel(ctx context.Context, s *Session, client, language, cwd string, env []string) (*Kernel, error) {
	if !s.Enter() {
		return nil, ErrGone
	}
	x := sandbox.ExecRequest{Env: env, Dir: Workdir("", s.tool)}
	k, err := launch(ctx, s.sb, language, cwd, s.sb.Limits(), x, func(x sandbox.ExecRequest) *result.Result {
		defer s.Leave()
		// Not the request's context: the kernel outlives its start.
		res, _ := n.Exec(context.WithoutCancel(ctx), s, client, x)
		return res
	})
	switch {
	case err == nil:
		k.s.Store(s)
		go k.endWith(s)
		return k, nil
	case !s.Alive():
		return nil, ErrGone
	case errors.Is(err, interp.ErrStart):
		return nil, err
	}
	n.opts.Logger.Warn("a kernel did not start", "session", s.id, "language", language, "err", err)
	return nil, fmt.Errorf("%w: %s (the tool's image needs python3 with IPython, and bash for bash)", ErrKernel, language)
}

// prestart returns the pool's Prepare of a tool whose pool names
// kernels: each is started in the pooled sandbox, as the sandbox's user
// in the tool's working directory, before a claim can find it; the claim
// hands them to the session. Nil when the tool names none.
func (n *Node) prestart(t *config.Tool, limits sandbox.Limits) func(context.Context, *sandbox.Sandbox) error {
	if len(t.Pool.Kernels) == 0 {
		return nil
	}
	return func(ctx context.Context, sb *sandbox.Sandbox) error {
		var ks []*Kernel
		for _, language := range t.Pool.Kernels {
			x := sandbox.ExecRequest{Env: t.Env, Dir: Workdir("", t), SampleEvery: 250 * time.Millisecond}
			k, err := launch(ctx, sb, language, "", limits, x, func(x sandbox.ExecRequest) *result.Result { return sb.Exec(context.WithoutCancel(ctx), x) })
			if err != nil {
				for _, k := range ks {
					k.Kill()
				}
				return fmt.Errorf("start its %s kernel: %w", language, err)
			}
			ks = append(ks, k)
		}
		n.kernels.Store(sb.ID(), ks)
		// Whoever takes the kernels out of the map owns them: the claim,
		// or this, once the sandbox has died unclaimed.
		go func() {
			<-sb.Done()
			if v, ok := n.kernels.LoadAndDelete(sb.ID()); ok {
				for _, k := range v.([]*Kernel) {
					k.Kill()
				}
			}
		}()
		return nil
	}
}

// claimKernels gives s the kernels started in its sandbox before its
// claim, each given the session's environment (the binding's variables,
// then the tool's, as every command of the session has them). A kernel
// whose command ends, once the session has it, ends the session as a
// command's would (a breached limit).
func (n *Node) claimKernels(ctx context.Context, s *Session) {
	v, ok := n.kernels.LoadAndDelete(s.sb.ID())
	if !ok {
		return
	}
	env := map[string]string{}
	for _, kv := range append(append([]string(nil), s.bind.Env()...), s.tool.Env...) {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	var ks []*Kernel
	for _, k := range v.([]*Kernel) {
		if len(env) > 0 {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := k.SetEnv(sctx, env)
			cancel()
			if err != nil {
				n.opts.Logger.Warn("a kernel started ahead refused its session's environment; it is ended", "session", s.id, "err", err)
				k.Kill()
				continue
			}
		}
		k.s.Store(s)
		go k.endWith(s)
		go func() {
			<-k.done
			if k.end != nil && k.Why() == nil {
				s.afterExec(context.Background(), k.end)
			}
		}()
		ks = append(ks, k)
	}
	s.mu.Lock()
	s.kernels = ks
	s.mu.Unlock()
}

// TakeKernel hands the session's kernel of language that was started
// before its claim to the caller, once; nil when there is none.
func (s *Session) TakeKernel(language string) *Kernel {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.kernels {
		if k.Language == language {
			s.kernels = append(s.kernels[:i], s.kernels[i+1:]...)
			return k
		}
	}
	return nil
}
