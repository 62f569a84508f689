// Package runner runs one command in a sandbox that has been created (or
// claimed from a pool): it binds the caller's policy to the sandbox — the
// egress gateway and, when the tool uses services, the credential broker —
// runs the command, closes both, and returns the result with every egress
// and broker decision in it. The CLI and the daemon both use it; creating
// and destroying the sandbox stay with them.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Policy is what binds to a sandbox when it is claimed.
type Policy struct {
	// Tool labels the events.
	Tool string
	// Egress are the destinations the sandbox may reach.
	Egress  []policy.Destination
	Network egress.Limits
	// Services are the broker services of the tool, with the secrets
	// they name; none means no broker.
	Services []*config.Service
	Secrets  map[string]*config.Secret
}

// Request is one command to run.
type Request struct {
	Policy Policy
	// Exec is the command; its Env is added after the proxy and broker
	// variables, so the caller's own values win. Exec.OnEvent, if set,
	// also receives egress and broker events.
	Exec sandbox.ExecRequest
	// Explain, when not nil, gets one line per distinct denial (the CLI's
	// default mode), at most a handful.
	Explain io.Writer
}

// Run binds the policy to sb, runs the command and returns its result,
// which is never nil. The caller destroys sb afterwards.
func Run(ctx context.Context, sb *sandbox.Sandbox, req Request) *result.Result {
	log := &netLog{start: time.Now(), live: req.Exec.OnEvent, stderr: req.Explain}
	p := req.Policy
	gw, err := egress.Attach(ctx, sb.NetNS(), egress.Config{
		Tool:      p.Tool,
		SandboxID: sb.ID(),
		Policy:    policy.New(p.Egress),
		Limits:    p.Network,
		OnEvent:   log.add,
	})
	if err != nil {
		return &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: err.Error()}
	}
	var br *broker.Broker
	var brokerEnv []string
	if len(p.Services) > 0 {
		br, err = broker.Attach(ctx, sb.NetNS(), broker.Config{
			Tool:      p.Tool,
			SandboxID: sb.ID(),
			Services:  p.Services,
			Secrets:   p.Secrets,
			OnEvent:   log.addBroker,
		})
		if err == nil {
			if brokerEnv, err = br.Env(); err != nil {
				err = errors.Join(err, closeBounded(ctx, br.Close))
			}
		}
		if err != nil {
			err = errors.Join(err, closeBounded(ctx, gw.Close))
			return &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: err.Error()}
		}
	}
	x := req.Exec
	// Later entries win: the tool's and the caller's own variables over
	// the proxy and the services' placeholders.
	x.Env = append(append(egress.Env(), brokerEnv...), x.Env...)
	r := sb.Exec(ctx, x)
	// The gateway and broker close before the result is complete, so that
	// connections still open end, and are logged, first.
	var cerr []error
	if err := closeBounded(ctx, gw.Close); err != nil {
		cerr = append(cerr, err)
	}
	if br != nil {
		if err := closeBounded(ctx, br.Close); err != nil {
			cerr = append(cerr, err)
		}
	}
	log.fill(r)
	if len(cerr) > 0 && r.Outcome != result.Error && req.Explain != nil {
		fmt.Fprintf(req.Explain, "airlock: %v\n", errors.Join(cerr...))
	}
	return r
}

// closeBounded closes a gateway or broker, bounded so a stuck connection
// cannot hold the run's end.
func closeBounded(ctx context.Context, closeFn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return closeFn(ctx)
}

// netLog collects a run's egress and broker events for the result and,
// when asked, passes them on live.
type netLog struct {
	start   time.Time
	live    func(result.Event)
	stderr  io.Writer
	mu      sync.Mutex
	events  []result.EgressEvent
	dropped int
	broker  []result.BrokerEvent
	bdrop   int
	shown   int
	seen    map[string]bool // denials already explained
}

// maxShownDenials bounds the denial lines of Explain; a sandbox can
// trigger denials in a loop.
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
		l.explainEgress(&ev)
	}
}

func (l *netLog) explainEgress(ev *result.EgressEvent) {
	l.explain(ev.Kind+" "+ev.Destination+" "+ev.Reason, fmt.Sprintf("egress denied (%s): %s: %s", ev.Kind, ev.Destination, ev.Reason))
}

func (l *netLog) explainBroker(ev *result.BrokerEvent) {
	l.explain("broker "+ev.Method+" "+ev.Service+ev.Path+" "+ev.Reason, fmt.Sprintf("broker refused %s %s%s: %s", ev.Method, ev.Service, ev.Path, ev.Reason))
}

// Explainer returns a function that prints on w one line per distinct
// egress or broker denial among the events it is given, as Run does with
// Request.Explain. The CLI uses it for runs streamed from the daemon.
func Explainer(w io.Writer) func(result.Event) {
	l := &netLog{stderr: w}
	return func(ev result.Event) {
		switch {
		case ev.Egress != nil && !ev.Egress.Allow:
			l.explainEgress(ev.Egress)
		case ev.Broker != nil && !ev.Broker.Allow:
			l.explainBroker(ev.Broker)
		}
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
		l.explainBroker(&ev)
	}
}

// explain prints a denial once per distinct denial: resolvers retry and
// ask for A and AAAA, and the same refusal once is enough.
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
