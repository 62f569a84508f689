package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// RunRequest is one run of a tool in a fresh sandbox.
type RunRequest struct {
	Tool *config.Tool
	// Client is who the audit log says made the call.
	Client string
	// Caller made the call: its token's concurrency bounds it. A run
	// without one is refused (fail closed).
	Caller *Caller
	Argv   []string
	// RecordArgv is the argv the audit log keeps (secret inputs
	// masked); nil keeps Argv.
	RecordArgv []string
	Env        []string
	Dir        string
	Stdin      io.Reader
	// Capture keeps the output for the result (the caller takes it
	// whole), within the node's captured-output budget.
	Capture bool
	// OnEvent is given the command's events as they come; it must not
	// block for long (sandbox.ExecRequest.OnEvent).
	OnEvent func(result.Event)
	// Started, if set, is called once the run is recorded and has its
	// sandbox, just before the command starts; an error ends the run
	// there.
	Started func() error
	// TTY, if set, gives the command a terminal of this size; Resize
	// then carries its later sizes.
	TTY    *sandbox.WinSize
	Resize <-chan sandbox.WinSize
	// Limits, if set, are the run's ceilings, lowered under the tool's
	// (attach.RunLimits); nil keeps the tool's.
	Limits *sandbox.Limits
	// Also, if set, gives events recorded with the run's outcome, in
	// the same write of the log (an MCP call's record).
	Also func(*result.Result) []audit.Event
}

// extra is what j.Also gives for res.
func (j *RunRequest) extra(res *result.Result) []audit.Event {
	if j.Also == nil {
		return nil
	}
	return j.Also(res)
}

// Run records a run, claims a sandbox of its tool (warm from the pool, or
// created), runs the command with the tool's policy bound, and queues the
// record of its outcome before returning it. done waits for that record
// to be written and destroys the sandbox; call it once the answer is out.
// On error nothing ran and done is nil.
func (n *Node) Run(ctx context.Context, j RunRequest) (out *result.Result, done func(), err error) {
	// The one check of who may use the tool, whatever the edge checked
	// before: an edge that forgot fails closed here. No caller is
	// refused too: none stands for Local.
	if err := n.Authorize(j.Caller, j.Tool.Name); err != nil {
		return nil, nil, err
	}
	release, err := n.hold(j.Caller, false)
	if err != nil {
		return nil, nil, err
	}
	if j.Capture {
		// Room for the output the answer will hold, before anything
		// starts: the daemon's own memory is no sandbox's ceiling.
		unhold := release
		free, err := n.ReserveCapture(ctx, j.Tool, j.Limits)
		if err != nil {
			unhold()
			return nil, nil, err
		}
		release = func() { free(); unhold() }
	}
	defer func() {
		if done == nil {
			release()
		}
	}()
	scope := &runScope{tool: j.Tool.Name, run: newRunID(), client: j.Client}
	// The run's span ends once its sandbox is gone (done), or with the
	// error that stopped it.
	// Under the caller's span, if its request carried one.
	span := n.rootSpan(tracing.ParentOf(ctx), "airlock.run", *scope)
	scope.span = span.Context()
	defer func() {
		switch {
		case span == nil: // tracing is off
			return
		case err != nil:
			endSpan(span, err)
			return
		}
		traceResult(span, out)
		finish := done
		done = func() {
			finish()
			span.End()
		}
	}()
	rec := j.RecordArgv
	if rec == nil {
		rec = j.Argv
	}
	// The run is recorded before its command starts. The record's write
	// (a transaction of the audit log) overlaps the claim and the binding
	// of the policy; while the log is known to fail, it is tried first, so
	// that refused runs consume no sandbox.
	recorded := func(context.Context) error { return nil }
	if n.audit.Err() != nil {
		if err := n.recordStart(ctx, *scope, rec, j.Env, j.Dir); err != nil {
			return nil, nil, err
		}
	} else {
		// Queued as the scope is before the claim fills in the sandbox.
		recorded = n.queueStart(ctx, *scope, rec, j.Env, j.Dir)
	}
	// Started on a miss: the binding below and the command's request
	// overlap init's start.
	claimSpan := n.span(scope.span, "airlock.claim", *scope)
	sb, warm, err := n.claim(ctx, j.Tool.Name, true)
	claimSpan.Set(tracing.Bool(attrWarm, warm))
	if sb != nil {
		claimSpan.Set(tracing.String(attrSandbox, sb.ID()))
	}
	endSpan(claimSpan, err)
	if err != nil {
		if rerr := recorded(context.WithoutCancel(ctx)); rerr != nil {
			return nil, nil, rerr
		}
		e := ErrNoSandbox
		if ctx.Err() != nil {
			e = fmt.Errorf("the caller went away before the command started: %w", context.Cause(ctx))
		} else if errors.Is(err, pool.ErrClosed) {
			e = ErrShutdown
		} else if errors.Is(err, ErrToolRemoved) {
			e = err
		} else if errors.Is(err, sandbox.ErrCapacity) {
			e = AtCapacity(err)
		} else if ue := (*sandbox.UnsupportedError)(nil); errors.As(err, &ue) {
			e = ue
		} else {
			n.counts.Failures.Add(1)
			n.opts.Logger.Warn("claim failed", "tool", j.Tool.Name, "err", err)
		}
		n.finishRun(ctx, *scope, &result.Result{Outcome: result.Error, Error: e.Error()})
		return nil, nil, e
	}
	scope.sandbox = sb.ID()
	span.Set(tracing.String(attrSandbox, sb.ID()))
	destroy := func() {
		s := n.span(scope.span, "airlock.destroy", *scope)
		err := sb.Destroy(context.WithoutCancel(ctx))
		if err != nil {
			n.opts.Logger.Warn("destroy failed", "sandbox", sb.ID(), "err", err)
		}
		endSpan(s, err)
	}
	b, bindErr := n.bindClaimed(ctx, sb, j.Tool, scope, nil)
	if rerr := recorded(context.WithoutCancel(ctx)); rerr != nil {
		if bindErr == nil {
			_ = b.Close(context.WithoutCancel(ctx))
		}
		destroy()
		return nil, nil, rerr
	}
	n.claimed(*scope, warm)
	n.counts.Runs.Add(1)
	if bindErr != nil {
		res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: bindErr.Error()}
		n.finishRun(ctx, *scope, res, j.extra(res)...)
		return res, func() { destroy(); release() }, nil
	}
	if j.Limits != nil {
		// Before the command starts, so that all of it runs under them.
		if err := sb.Lower(*j.Limits); err != nil {
			n.counts.Failures.Add(1)
			n.opts.Logger.Warn("lower a run's limits", "sandbox", sb.ID(), "err", err)
			res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: "airlock could not apply the run's lowered limits"}
			n.finishRun(ctx, *scope, res, j.extra(res)...)
			return res, func() { _ = b.Close(context.WithoutCancel(ctx)); destroy(); release() }, nil
		}
	}
	x := sandbox.ExecRequest{
		Argv:        j.Argv,
		Env:         append(append([]string(nil), j.Tool.Env...), j.Env...),
		Dir:         j.Dir,
		SampleEvery: 250 * time.Millisecond,
		Capture:     j.Capture && j.TTY == nil,
		OnEvent:     j.OnEvent,
		Stdin:       j.Stdin,
	}
	if j.TTY != nil {
		x.TTY, x.Resize = j.TTY, j.Resize
	}
	// In flight (airlock ps lists it, airlock kill ends it) before the
	// caller is told it started.
	kctx, kill, stop := killable(ctx)
	drop := n.live.add(&liveRun{id: scope.run, kind: "run", tool: j.Tool.Name, client: j.Client, owner: j.Caller.Name, sb: sb, started: time.Now(), kill: kill})
	if j.Started != nil {
		if err := j.Started(); err != nil {
			drop()
			stop()
			res := &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: err.Error()}
			n.finishRun(ctx, *scope, res, j.extra(res)...)
			return res, func() { _ = b.Close(context.WithoutCancel(ctx)); destroy(); release() }, nil
		}
	}
	execSpan := n.span(scope.span, "airlock.exec", *scope)
	n.traceDecisions(sb.ID(), execSpan.Context())
	res, closeNet := b.RunCloseLater(kctx, x, nil)
	traceResult(execSpan, res)
	execSpan.End()
	if context.Cause(kctx) == errKilled && ctx.Err() == nil {
		// Killed, as the destroy does to its processes (SIGKILL): not a
		// failure of airlock, which callers (exit status 125) must be able
		// to tell apart.
		res.Outcome, res.Signal, res.ExitCode, res.Error = result.Signaled, int(syscall.SIGKILL), 0, "the run was ended by airlock kill"
	}
	stop()
	outcome := n.queueFinish(ctx, *scope, res, j.extra(res)...)
	// Out of `airlock ps` once its end is queued to the log: a caller
	// that sees it gone and reads the log (after a flush) finds the end.
	drop()
	return res, func() {
		if err := closeNet(context.WithoutCancel(ctx)); err != nil {
			n.opts.Logger.Warn("close the sandbox's network", "sandbox", sb.ID(), "err", err)
		}
		outcome()
		destroy()
		release()
	}, nil
}

// Later runs done (a run's destroy) in the background, for an edge that
// cannot act after its answer is written; Stop waits for it. Once Stop
// waits, done runs at once, in the caller.
func (n *Node) Later(done func()) {
	n.laterMu.Lock()
	if n.lateStop {
		n.laterMu.Unlock()
		done()
		return
	}
	n.destroying.Add(1)
	n.laterMu.Unlock()
	go func() {
		defer n.destroying.Done()
		done()
	}()
}

// Workdir is where a command of t runs: asked, else the tool's, else the
// sandbox's home.
func Workdir(asked string, t *config.Tool) string {
	switch {
	case asked != "":
		return asked
	case t.Workdir != "":
		return t.Workdir
	}
	return sandbox.HomeDir
}
