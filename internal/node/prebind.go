package node

import (
	"context"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/tracing"
	"github.com/airlockhq/airlock/sandbox"
)

// A tool's policy is bound to each of its sandboxes while the sandbox is
// built (its egress gateway opened in the sandbox's network namespace as
// init starts), so that a run that claims one from the pool finds it bound:
// binding at the claim was a tenth of a millisecond of every warm run. The
// policy is the tool's own and the same for every caller; what differs per
// caller, the recording of its decisions, is set at the claim
// (runner.Binding.SetRecorders). No caller's code runs in a pooled sandbox
// before it is claimed (a code interpreter's kernel started ahead, see
// kernel.go, only waits for its first execution), so the gateway has
// nothing to record before then.
//
// Tools with broker services are bound at the claim as before: the broker
// reads its secrets when it attaches, and a sandbox may wait in the pool
// for long.

// prebind returns the Spec.OnStart of t's pool, whose sandboxes it binds
// to pol, or nil when t's sandboxes are bound at the claim. A binding that
// fails here is not an error of the sandbox's creation: the claim binds
// again and reports what fails then.
func (n *Node) prebind(t *config.Tool, pol attach.Policy) func(*sandbox.Sandbox) error {
	if len(pol.Services) > 0 {
		return nil
	}
	return func(sb *sandbox.Sandbox) error {
		b, err := attach.Bind(context.Background(), sb, pol)
		if err != nil {
			n.opts.Logger.Debug("bind while creating failed; binding at the claim", "tool", t.Name, "sandbox", sb.ID(), "err", err)
			return nil
		}
		n.prebound.Store(sb.ID(), b)
		// Whoever takes the binding out of the map owns it: the claim,
		// or this, once the sandbox has died unclaimed (destroyed by its
		// pool, or never ready).
		n.prebinds.Add(1)
		go func() {
			defer n.prebinds.Done()
			<-sb.Done()
			if v, ok := n.prebound.LoadAndDelete(sb.ID()); ok {
				if err := v.(*runner.Binding).Close(context.Background()); err != nil {
					n.opts.Logger.Warn("close the network of an unclaimed sandbox", "sandbox", sb.ID(), "err", err)
				}
			}
		}()
		return nil
	}
}

// bindClaimed returns t's policy bound to the claimed sb, its decisions
// recorded in scope: the binding made while sb was built, or a new one.
func (n *Node) bindClaimed(ctx context.Context, sb *sandbox.Sandbox, t *config.Tool, scope *runScope, narrowed *attach.Policy) (_ *runner.Binding, err error) {
	span := n.span(scope.span, "airlock.bind", *scope)
	defer func() { endSpan(span, err) }()
	onEgress, onBroker := n.netRecorder(scope)
	if narrowed != nil {
		// A policy of its own (a caller narrowed the tool's): the one
		// bound while the pool built the sandbox goes first.
		if v, ok := n.prebound.LoadAndDelete(sb.ID()); ok {
			_ = v.(*runner.Binding).Close(ctx)
		}
		pol := *narrowed
		pol.OnEgress, pol.OnBroker = onEgress, onBroker
		return attach.Bind(ctx, sb, pol)
	}
	if v, ok := n.prebound.LoadAndDelete(sb.ID()); ok {
		b := v.(*runner.Binding)
		b.SetRecorders(onEgress, onBroker)
		span.Set(tracing.Bool("airlock.bind.ahead", true)) // bound while pooled
		return b, nil
	}
	pol := n.plan(t.Name).Policy
	pol.OnEgress, pol.OnBroker = onEgress, onBroker
	return attach.Bind(ctx, sb, pol)
}

// Prebound are the ids of the pooled sandboxes whose binding was made
// ahead and waits for their claim.
func (n *Node) Prebound() []string {
	var ids []string
	n.prebound.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	return ids
}
