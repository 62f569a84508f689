package daemoncmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/result"
)

// runRecorder records a one-shot run in the config's audit log, as the
// daemon records its runs: the start before the command runs (a run that
// cannot be recorded does not run), the outcome after.
type runRecorder struct {
	log  *audit.Log
	base audit.Event
}

// recordRun opens the audit log when the config has an audit section and
// records the run's start; nil without one.
func recordRun(ctx context.Context, cfg *config.Config, tool string, argv []string, workdir string) (*runRecorder, error) {
	if cfg == nil || !cfg.Audit.Set {
		return nil, nil
	}
	l, err := audit.Open(ctx, audit.Options{Path: cfg.Audit.Path, Retention: cfg.Audit.Retention, Sync: cfg.Audit.Sync})
	if err != nil {
		return nil, fmt.Errorf("the config's audit log cannot be written, so the run does not start: %w", err)
	}
	var id [8]byte
	rand.Read(id[:])
	r := &runRecorder{log: l, base: audit.Event{Tool: tool, Run: "r_" + hex.EncodeToString(id[:]),
		Client: fmt.Sprintf("cli:uid=%d,pid=%d", os.Getuid(), os.Getpid())}}
	e := r.base
	e.Kind = audit.KindRunStarted
	e.Detail = audit.Detail(map[string]any{"argv": argv, "workdir": workdir, "one_shot": true})
	if err := l.Append(ctx, e); err != nil {
		l.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("the config's audit log cannot be written, so the run does not start: %w", err)
	}
	return r, nil
}

// finish records the outcome and closes the log.
func (r *runRecorder) finish(ctx context.Context, res *result.Result) error {
	if r == nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	res.RunID = r.base.Run
	e := r.base
	e.Kind, e.Sandbox, e.Decision = audit.KindRunFinished, res.SandboxID, string(res.Outcome)
	e.Detail = audit.Detail(map[string]any{"exit_code": res.ExitCode, "signal": res.Signal, "limit": res.Limit, "error": res.Error, "usage": res.Usage, "one_shot": true})
	evs := []audit.Event{e}
	if res.Limit != nil {
		b := r.base
		b.Kind, b.Sandbox, b.Decision, b.Detail = audit.KindLimit, res.SandboxID, res.Limit.Name, audit.Detail(result.Breach{Limit: res.Limit, PostMortem: res.PostMortem})
		evs = append(evs, b)
	}
	err := r.log.Append(ctx, evs...)
	if cerr := r.log.Close(ctx); err == nil {
		err = cerr
	}
	return err
}
