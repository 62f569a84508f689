package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/broker"
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
	for _, name := range t.Services {
		s, err := cfg.Service(name)
		if err != nil {
			return err
		}
		rf.services = append(rf.services, s)
	}
	rf.secrets = cfg.Secrets
	return nil
}

// netLog collects a run's egress and broker events for the result and,
// in the modes that want them, shows them live.
type netLog struct {
	start   time.Time
	live    func(result.Event) // --events; nil otherwise
	stderr  io.Writer          // default mode: denials are explained here
	mu      sync.Mutex
	events  []result.EgressEvent
	dropped int
	broker  []result.BrokerEvent
	bdrop   int
	shown   int
	seen    map[string]bool // denials already explained on stderr
}

// maxShownDenials bounds the denial lines of the default mode; a sandbox
// can trigger denials in a loop.
const maxShownDenials = 10

func (l *netLog) add(ev result.EgressEvent) {
	l.mu.Lock()
	if len(l.events) < result.MaxEgressEvents {
		l.events = append(l.events, ev)
	} else {
		l.dropped++
	}
	l.mu.Unlock()
	if l.live != nil {
		l.live(result.Event{Type: result.EventEgress, Millis: time.Since(l.start).Milliseconds(), Egress: &ev})
	}
	if !ev.Allow {
		l.explain(ev.Kind+" "+ev.Destination+" "+ev.Reason, fmt.Sprintf("egress denied (%s): %s: %s", ev.Kind, ev.Destination, ev.Reason))
	}
}

func (l *netLog) addBroker(ev result.BrokerEvent) {
	l.mu.Lock()
	if len(l.broker) < result.MaxEgressEvents {
		l.broker = append(l.broker, ev)
	} else {
		l.bdrop++
	}
	l.mu.Unlock()
	if l.live != nil {
		l.live(result.Event{Type: result.EventBroker, Millis: time.Since(l.start).Milliseconds(), Broker: &ev})
	}
	if !ev.Allow {
		l.explain("broker "+ev.Method+" "+ev.Service+ev.Path+" "+ev.Reason, fmt.Sprintf("broker refused %s %s%s: %s", ev.Method, ev.Service, ev.Path, ev.Reason))
	}
}

// explain prints a denial on stderr in the default mode, once per
// distinct denial: resolvers retry and ask for A and AAAA, and the same
// refusal once is enough.
func (l *netLog) explain(key, line string) {
	if l.stderr == nil {
		return
	}
	l.mu.Lock()
	show := l.shown <= maxShownDenials && !l.seen[key]
	if show {
		if l.seen == nil {
			l.seen = map[string]bool{}
		}
		l.seen[key] = true
		l.shown++
	}
	n := l.shown
	l.mu.Unlock()
	switch {
	case !show:
	case n > maxShownDenials:
		fmt.Fprintln(l.stderr, "airlock: further denials not shown")
	default:
		fmt.Fprintln(l.stderr, "airlock: "+line)
	}
}

// fill puts the collected events into r.
func (l *netLog) fill(r *result.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Egress = append([]result.EgressEvent{}, l.events...)
	r.EgressDropped = l.dropped
	r.Broker = append([]result.BrokerEvent{}, l.broker...)
	r.BrokerDropped = l.bdrop
}

// attachEgress opens the sandbox's network gateway.
func attachEgress(ctx context.Context, rf *runFlags, sb *sandbox.Sandbox, log *netLog) (*egress.Gateway, error) {
	return egress.Attach(ctx, sb.NetNS(), egress.Config{
		Tool:      rf.tool,
		SandboxID: sb.ID(),
		Policy:    policy.New(rf.egress),
		Limits:    rf.network,
		OnEvent:   log.add,
	})
}

// attachBroker opens the sandbox's credential broker when the tool uses
// services, and returns the environment it adds.
func attachBroker(ctx context.Context, rf *runFlags, sb *sandbox.Sandbox, log *netLog) (*broker.Broker, []string, error) {
	if len(rf.services) == 0 {
		return nil, nil, nil
	}
	b, err := broker.Attach(ctx, sb.NetNS(), broker.Config{
		Tool:      rf.tool,
		SandboxID: sb.ID(),
		Services:  rf.services,
		Secrets:   rf.secrets,
		OnEvent:   log.addBroker,
	})
	if err != nil {
		return nil, nil, err
	}
	env, err := b.Env()
	if err != nil {
		return nil, nil, errors.Join(err, closeBounded(ctx, b.Close))
	}
	return b, env, nil
}

// closeBounded closes a gateway or broker, bounded so a stuck connection
// cannot hold the run's end.
func closeBounded(ctx context.Context, closeFn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return closeFn(ctx)
}
