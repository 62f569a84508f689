package node

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/audit"
)

// reconcile closes, in the audit log, what a daemon that did not stop
// cleanly (SIGKILL, a crash, the host's power) left open: a run whose
// outcome was never recorded gets a run.finished of outcome "error", and
// a session never ended a session.ended, each saying why, so that no run
// or session of the log is left without an end. A run's outcome is
// written just after its answer (see queueFinish): a kill in between
// loses an outcome its caller was told, and this says so in the log
// rather than leave the run open. It reads only the events since the
// previous daemon's start, and only when that daemon has no
// daemon.stopped (a clean shutdown records every outcome first).
// It returns how many it closed.
func (n *Node) reconcile(ctx context.Context) (int, error) {
	daemons, err := n.audit.Query(ctx, audit.Query{Kind: "daemon", Tail: true, Limit: 2})
	if err != nil {
		return 0, err
	}
	if len(daemons) < 2 || daemons[0].Kind != audit.KindDaemonStarted {
		return 0, nil // the first daemon on this log, or a clean stop
	}
	from, until := daemons[0].ID, daemons[1].ID
	runs := map[string]audit.Event{}
	sessions := map[string]audit.Event{}
	for _, kind := range []string{"run", "session"} {
		for after := from; after < until; {
			evs, err := n.audit.Query(ctx, audit.Query{Kind: kind, After: after, Limit: audit.MaxLimit})
			if err != nil {
				return 0, err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if ev.ID > until {
					break
				}
				switch ev.Kind {
				case audit.KindRunStarted:
					runs[ev.Run] = ev
				case audit.KindRunFinished:
					delete(runs, ev.Run)
				case audit.KindSessionCreated:
					sessions[ev.Session] = ev
				case audit.KindSessionEnded:
					delete(sessions, ev.Session)
				}
			}
			after = evs[len(evs)-1].ID
		}
	}
	why := fmt.Sprintf("the daemon stopped (killed or crashed) before this was recorded; closed by the next daemon (audit event %d)", until)
	var evs []audit.Event
	for run, s := range runs {
		if s.Sandbox == "" {
			// Recorded before its claim: the claim names the sandbox.
			if cl, err := n.audit.Query(ctx, audit.Query{Kind: audit.KindSandboxClaimed, Run: run, After: from, Limit: 1}); err == nil && len(cl) == 1 {
				s.Sandbox = cl[0].Sandbox
			}
		}
		e := audit.Event{Kind: audit.KindRunFinished, Tool: s.Tool, Sandbox: s.Sandbox, Session: s.Session, Run: s.Run, Client: s.Client,
			Decision: "error", Detail: audit.Detail(map[string]any{"error": "outcome not recorded: " + why, "reconciled": true})}
		evs = append(evs, e)
	}
	for _, s := range sessions {
		evs = append(evs, audit.Event{Kind: audit.KindSessionEnded, Tool: s.Tool, Sandbox: s.Sandbox, Session: s.Session, Client: s.Client,
			Detail: audit.Detail(map[string]any{"reason": "daemon stopped: " + why, "reconciled": true})})
	}
	if len(evs) == 0 {
		return 0, nil
	}
	return len(evs), n.audit.Append(ctx, evs...)
}
