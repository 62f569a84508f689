package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// allowFlag is the repeatable --allow HOST[:PORT] flag.
type allowFlag struct{ v *[]policy.Destination }

func (f allowFlag) String() string { return "" }

func (f allowFlag) Set(s string) error {
	d, err := policy.ParseDestination(s)
	if err != nil {
		return err
	}
	*f.v = append(*f.v, d)
	return nil
}

// applyTool loads the config (when --config or --tool asks for it) and
// puts the tool's settings under the flags: a flag given on the command
// line always wins over the tool's value.
func (rf *runFlags) applyTool(set map[string]bool) error {
	if rf.configPath == "" && rf.tool == "" {
		return nil
	}
	path, err := config.Find(rf.configPath, os.Getenv, func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	})
	if err != nil {
		return err
	}
	cfg := config.Empty()
	if path != "" {
		if cfg, err = config.Load(path); err != nil {
			return err
		}
	}
	if rf.tool == "" {
		return nil
	}
	t, err := cfg.Tool(rf.tool)
	if err != nil {
		return err
	}
	limits := t.Limits.Apply(sandbox.DefaultLimits())
	flagged := map[string]func(){
		"memory":   func() { limits.Memory = rf.limits.Memory },
		"pids":     func() { limits.Pids = rf.limits.Pids },
		"disk":     func() { limits.Disk = rf.limits.Disk },
		"fds":      func() { limits.FDs = rf.limits.FDs },
		"output":   func() { limits.Output = rf.limits.Output },
		"time":     func() { limits.Time = rf.limits.Time },
		"cpu":      func() { limits.CPUMilli = rf.limits.CPUMilli },
		"cpu-time": func() { limits.CPUTime = rf.limits.CPUTime },
	}
	for name, apply := range flagged {
		if set[name] {
			apply()
		}
	}
	rf.limits = limits
	rf.env = append(append([]string(nil), t.Env...), rf.env...)
	if !set["workdir"] && t.Workdir != "" {
		rf.workdir = t.Workdir
	}
	rf.egress = append(append([]policy.Destination(nil), t.Egress...), rf.egress...)
	rf.network = egress.Limits{
		Connections: t.Network.Connections,
		Bytes:       t.Network.Bytes,
		DNSRate:     t.Network.DNSRate,
	}
	return nil
}

// egressLog collects a run's egress events for the result and, in the
// modes that want them, shows them live.
type egressLog struct {
	start   time.Time
	live    func(result.Event) // --events; nil otherwise
	stderr  io.Writer          // default mode: denials are explained here
	mu      sync.Mutex
	events  []result.EgressEvent
	dropped int
	shown   int
	seen    map[string]bool // denials already explained on stderr
}

// maxShownDenials bounds the denial lines of the default mode; a sandbox
// can trigger denials in a loop.
const maxShownDenials = 10

func (l *egressLog) add(ev result.EgressEvent) {
	l.mu.Lock()
	if len(l.events) < result.MaxEgressEvents {
		l.events = append(l.events, ev)
	} else {
		l.dropped++
	}
	// One line per distinct denial: resolvers retry and ask for A and
	// AAAA, and the same refusal once is enough.
	key := ev.Kind + " " + ev.Destination + " " + ev.Reason
	show := l.stderr != nil && !ev.Allow && l.shown <= maxShownDenials && !l.seen[key]
	if show {
		if l.seen == nil {
			l.seen = map[string]bool{}
		}
		l.seen[key] = true
		l.shown++
	}
	n := l.shown
	l.mu.Unlock()
	if l.live != nil {
		l.live(result.Event{Type: result.EventEgress, Millis: time.Since(l.start).Milliseconds(), Egress: &ev})
	}
	switch {
	case !show:
	case n > maxShownDenials:
		fmt.Fprintln(l.stderr, "airlock: further egress denials not shown")
	default:
		fmt.Fprintf(l.stderr, "airlock: egress denied (%s): %s: %s\n", ev.Kind, ev.Destination, ev.Reason)
	}
}

func (l *egressLog) result() ([]result.EgressEvent, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]result.EgressEvent{}, l.events...), l.dropped
}

// attachEgress opens the sandbox's network gateway.
func attachEgress(ctx context.Context, rf *runFlags, sb *sandbox.Sandbox, log *egressLog) (*egress.Gateway, error) {
	return egress.Attach(ctx, sb.NetNS(), egress.Config{
		Tool:      rf.tool,
		SandboxID: sb.ID(),
		Policy:    policy.New(rf.egress),
		Limits:    rf.network,
		OnEvent:   log.add,
	})
}

// closeEgress closes the gateway, bounded so a stuck connection cannot
// hold the run's end.
func closeEgress(ctx context.Context, gw *egress.Gateway) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return gw.Close(ctx)
}
