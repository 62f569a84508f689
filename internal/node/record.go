package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// What the audit log records of runs, sessions and sandboxes: each is
// recorded here, in one place, whatever edge asked for it.

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return "r_" + hex.EncodeToString(b[:])
}

// observe records the runtime's sandbox lifecycle events.
func (n *Node) observe(ev sandbox.Lifecycle) {
	kind := map[string]string{
		sandbox.Created:   audit.KindSandboxCreated,
		sandbox.Destroyed: audit.KindSandboxDestroyed,
		sandbox.Swept:     audit.KindSandboxSwept,
	}[ev.Event]
	if kind == "" {
		return
	}
	e := audit.Event{Kind: kind, Tool: ev.Label, Sandbox: ev.ID}
	if ev.Event == sandbox.Destroyed {
		// The end of a claimed sandbox is its claimer's: a token that
		// reads only its own events sees its sandboxes go too.
		if c, ok := n.claimedBy.LoadAndDelete(ev.ID); ok {
			e.Client = c.(string)
		}
	}
	detail := map[string]string{}
	if ev.Err != nil {
		detail["error"] = ev.Err.Error()
	}
	if dg := n.plan(ev.Label).Digest; dg != "" && ev.Event == sandbox.Created {
		detail["image"] = dg // which content the sandbox's root was
	}
	if len(detail) > 0 {
		e.Detail = audit.Detail(detail)
	}
	n.audit.Record(e)
}

// runScope is what a run's audit events share.
type runScope struct {
	tool, sandbox, session, run, client string
	// span is the run's or session's span: its claim's and bind's go
	// under it.
	span tracing.Context
}

func (s runScope) event(kind string) audit.Event {
	return audit.Event{Kind: kind, Tool: s.tool, Sandbox: s.sandbox, Session: s.session, Run: s.run, Client: s.client}
}

// maxNetEvents bounds the egress, DNS and broker decisions recorded for
// one sandbox. A sandbox chooses how many it makes (a DNS query loop at
// the rate cap is 100 a second for as long as it lives), and the log's
// disk is shared: past the bound one audit.capped event says so and the
// rest are counted in the run's result only.
const maxNetEvents = 10000

// netRecorder returns the functions that record a binding's decisions.
func (n *Node) netRecorder(s *runScope) (func(result.EgressEvent), func(result.BrokerEvent)) {
	var count atomic.Int64
	record := func(e audit.Event) {
		switch c := count.Add(1); {
		case c <= maxNetEvents:
			n.audit.Record(e)
		case c == maxNetEvents+1:
			capped := s.event(audit.KindCapped)
			capped.Detail = audit.Detail(map[string]int{"recorded": maxNetEvents})
			n.audit.Record(capped)
		}
	}
	egress := func(ev result.EgressEvent) {
		kind := audit.KindEgress
		if ev.Kind == result.EgressDNS {
			kind = audit.KindDNS
		}
		e := s.event(kind)
		e.Time, e.Decision, e.Detail = ev.Time, decision(ev.Allow), audit.Detail(ev)
		record(e)
	}
	broker := func(ev result.BrokerEvent) {
		e := s.event(audit.KindBroker)
		e.Time, e.Decision, e.Detail = ev.Time, decision(ev.Allow), audit.Detail(ev)
		record(e)
	}
	return egress, broker
}

func decision(allow bool) string {
	if allow {
		return audit.Allow
	}
	return audit.Deny
}

// Bounds on what a run.started event keeps of the command.
const (
	maxAuditArgs   = 32
	maxAuditArgLen = 256
)

// recordStart records that a run is about to start and waits for it to
// be durable: a run that could not be recorded is not run.
//
// The wait goes on past ctx: a caller that goes away while the record is
// written must not leave a start without an end in the log. The caller
// checks ctx afterwards and records the end when it stops there.
func (n *Node) recordStart(ctx context.Context, s runScope, argv, env []string, workdir string) error {
	return n.queueStart(ctx, s, argv, env, workdir)(context.WithoutCancel(ctx))
}

// queueStart is recordStart in two halves: it queues the record and
// returns the wait for it to be durable, for a caller with work to do
// meanwhile that the record need not precede (claiming a sandbox, binding
// its policy), so that the log's writer runs alongside that work.
func (n *Node) queueStart(ctx context.Context, s runScope, argv, env []string, workdir string) (wait func(context.Context) error) {
	e := s.event(audit.KindRunStarted)
	// Environment values may carry a caller's secrets; only names are kept.
	names := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	e.Detail = audit.Detail(map[string]any{"argv": clip(argv), "env": names, "workdir": workdir})
	return n.acknowledgeLater(ctx, e)
}

// acknowledge appends e and waits until it is durable; what it gates
// (a run, a session) is refused with ErrAuditRefused when it cannot be.
// As recordStart, it waits past ctx, for the caller to record the end.
func (n *Node) acknowledge(ctx context.Context, e audit.Event) error {
	return n.acknowledgeLater(ctx, e)(context.WithoutCancel(ctx))
}

// acknowledgeLater queues e and returns acknowledge's wait.
func (n *Node) acknowledgeLater(ctx context.Context, e audit.Event) func(context.Context) error {
	refused := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n.counts.AuditRefusals.Add(1)
		n.opts.Logger.Error("refused: the audit log cannot be written", "kind", e.Kind, "err", err)
		return ErrAuditRefused
	}
	w, err := n.audit.Enqueue(ctx, e)
	if err != nil {
		err = refused(err)
		return func(context.Context) error { return err }
	}
	return func(ctx context.Context) error {
		if err := w(ctx); err != nil {
			return refused(err)
		}
		return nil
	}
}

// clip bounds argv for the log.
func clip(argv []string) []string {
	out := make([]string, 0, min(len(argv), maxAuditArgs+1))
	for i, a := range argv {
		if i == maxAuditArgs {
			out = append(out, fmt.Sprintf("... %d more", len(argv)-i))
			break
		}
		if len(a) > maxAuditArgLen {
			a = a[:maxAuditArgLen] + "..."
		}
		out = append(out, a)
	}
	return out
}

// finishRun records a run's outcome (and its breach, if any, and also)
// and waits until it is written.
func (n *Node) finishRun(ctx context.Context, s runScope, res *result.Result, also ...audit.Event) {
	n.queueFinish(ctx, s, res, also...)()
}

// queueFinish queues the record of a run's outcome (and its breach, if
// any) and returns a wait for it to be written. A run's answer goes out
// between the two: the record is queued before it, so an audit query
// made after the answer sees the outcome (queries wait for what is
// queued, see getAudit), and its write starts after it (at wait), so
// that it does not delay the answer. A write
// that fails is logged, as the start record is the one that gates a run.
func (n *Node) queueFinish(ctx context.Context, s runScope, res *result.Result, also ...audit.Event) (wait func()) {
	res.RunID = s.run // the caller's answer names the run it records
	e := s.event(audit.KindRunFinished)
	e.Decision = string(res.Outcome)
	e.Detail = audit.Detail(map[string]any{
		"exit_code": res.ExitCode, "signal": res.Signal, "limit": res.Limit, "error": res.Error,
		"usage": res.Usage, "truncated": res.Truncated,
		"egress": len(res.Egress) + res.EgressDropped, "broker": len(res.Broker) + res.BrokerDropped,
	})
	evs := []audit.Event{e}
	if res.Limit != nil {
		b := s.event(audit.KindLimit)
		b.Decision, b.Detail = res.Limit.Name, audit.Detail(result.Breach{Limit: res.Limit, PostMortem: res.PostMortem})
		evs = append(evs, b)
	}
	evs = append(evs, also...)
	ctx = context.WithoutCancel(ctx)
	failed := func(err error) {
		n.opts.Logger.Error("audit: a run's outcome could not be recorded", "run", s.run, "err", err)
	}
	// Quietly: the transaction starts once the answer is out, rather
	// than share the processors with the answer; and nobody waits for
	// it, so it goes with the next transaction anyone starts (on a busy
	// node, the next run's start) or within audit.Linger's bound: one
	// transaction a run, not two.
	if err := n.audit.Linger(ctx, evs...); err != nil {
		failed(err)
	}
	return func() {}
}

// claimed records that a sandbox was handed to a run or session.
func (n *Node) claimed(s runScope, warm bool) {
	n.claimedBy.Store(s.sandbox, s.client)
	e := s.event(audit.KindSandboxClaimed)
	e.Detail = audit.Detail(map[string]bool{"warm": warm})
	n.audit.Record(e)
}

// RecordFile records a file written into or read out of a session's
// workspace.
func (n *Node) RecordFile(client string, s *Session, op, path string, size int64, err error) {
	e := audit.Event{Kind: audit.KindFile, Tool: s.tool.Name, Sandbox: s.sb.ID(), Session: s.id, Client: client, Decision: audit.Allow}
	detail := map[string]any{"op": op, "path": Shorten(path), "bytes": size}
	if err != nil {
		e.Decision, detail["error"] = audit.Deny, err.Error()
	}
	e.Detail = audit.Detail(detail)
	n.audit.Record(e)
}

// maxAuditCode bounds the code a session.code event keeps.
const maxAuditCode = 4096

// Code is one execution of a session's code interpreter, as recorded.
type Code struct {
	// Code is what ran (kept up to 4 KiB); Language and Context the
	// context it ran in.
	Code, Language, Context string
	// Count is the execution's number in its context.
	Count int
	// ErrName is the name of the error it ended with, "" for none.
	ErrName string
	// Took is how long it ran.
	Took time.Duration
	// Err, when set, is why it did not end normally (interrupted, the
	// kernel broken).
	Err error
}

// RecordCode records code run in a session's code interpreter.
func (n *Node) RecordCode(client string, s *Session, c Code) {
	e := audit.Event{Kind: audit.KindCode, Tool: s.tool.Name, Sandbox: s.sb.ID(), Session: s.id, Client: client, Decision: audit.Allow}
	code := c.Code
	if len(code) > maxAuditCode {
		code = code[:maxAuditCode] + "..."
	}
	detail := map[string]any{"code": code, "language": c.Language, "context": c.Context, "execution_count": c.Count,
		"error": c.ErrName, "duration_ms": c.Took.Milliseconds()}
	if c.Err != nil {
		detail["ended"] = c.Err.Error()
	}
	e.Detail = audit.Detail(detail)
	n.audit.Record(e)
}

// Port is one request to a server in a session's sandbox (the E2B API's
// sandbox ports), as recorded.
type Port struct {
	Port         int
	Method, Path string
	Status       int
	Bytes        int64
	Took         time.Duration
}

// RecordPort records a request from outside to a port of a session's
// sandbox.
func (n *Node) RecordPort(client string, s *Session, p Port) {
	e := audit.Event{Kind: audit.KindPort, Tool: s.tool.Name, Sandbox: s.sb.ID(), Session: s.id, Client: client, Decision: audit.Allow}
	e.Detail = audit.Detail(map[string]any{"port": p.Port, "method": Shorten(p.Method), "path": Shorten(p.Path),
		"status": p.Status, "bytes": p.Bytes, "duration_ms": p.Took.Milliseconds()})
	n.audit.Record(e)
}
