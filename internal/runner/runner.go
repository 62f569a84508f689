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
	// OnEgress and OnBroker, if set, get every decision made while the
	// policy is bound, whether or not an exec is running (the audit
	// log); unlike a result's lists they are never capped.
	OnEgress func(result.EgressEvent)
	OnBroker func(result.BrokerEvent)
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
	b, err := Bind(ctx, sb, req.Policy)
	if err != nil {
		return &result.Result{SandboxID: sb.ID(), Outcome: result.Error, Error: err.Error()}
	}
	return b.Run(ctx, req.Exec, req.Explain)
}

// Run executes one command and closes the binding: the gateway and broker
// close before the result is complete, so that connections still open
// end, and are logged, first.
func (b *Binding) Run(ctx context.Context, x sandbox.ExecRequest, explain io.Writer) *result.Result {
	r := b.Exec(ctx, x, explain)
	b.closeInto(ctx, r, explain)
	return r
}

// RunCloseLater is Run for a caller with an answer to give before the
// binding closes: when nothing has reached the gateway (and there is no
// broker), closing it could add nothing to the result, and it is left to
// the returned close, for after the answer. Otherwise it closes at once,
// as Run does, and the returned close does nothing. Either way the caller
// calls it.
func (b *Binding) RunCloseLater(ctx context.Context, x sandbox.ExecRequest, explain io.Writer) (*result.Result, func(context.Context) error) {
	r := b.Exec(ctx, x, explain)
	if b.br == nil && b.gw.Quiet() {
		return r, b.Close
	}
	b.closeInto(ctx, r, explain)
	return r, func(context.Context) error { return nil }
}

// Binding is a policy bound to one sandbox for as long as it lives: the
// egress gateway and the broker stay open across execs (a session's).
type Binding struct {
	sb  *sandbox.Sandbox
	gw  *egress.Gateway
	br  *broker.Broker
	env []string

	onEgress func(result.EgressEvent)
	onBroker func(result.BrokerEvent)

	mu    sync.Mutex           // guards execs, onEgress and onBroker
	execs map[*netLog]struct{} // the execs running now get the events
}

// Bind attaches the policy to sb: the egress gateway and, when there are
// services, the credential broker.
func Bind(ctx context.Context, sb *sandbox.Sandbox, p Policy) (*Binding, error) {
	b := &Binding{sb: sb, execs: make(map[*netLog]struct{}), onEgress: p.OnEgress, onBroker: p.OnBroker}
	var err error
	b.gw, err = egress.Attach(ctx, sb.NetNS(), egress.Config{
		Tool:      p.Tool,
		SandboxID: sb.ID(),
		Policy:    policy.New(p.Egress),
		Limits:    p.Network,
		OnEvent:   b.egressEvent,
	})
	if err != nil {
		return nil, err
	}
	var brokerEnv []string
	if len(p.Services) > 0 {
		b.br, err = broker.Attach(ctx, sb.NetNS(), broker.Config{
			Tool:      p.Tool,
			SandboxID: sb.ID(),
			Services:  p.Services,
			Secrets:   p.Secrets,
			OnEvent:   b.brokerEvent,
		})
		if err == nil {
			if brokerEnv, err = b.br.Env(); err != nil {
				err = errors.Join(err, closeBounded(ctx, b.br.Close))
			}
		}
		if err != nil {
			return nil, errors.Join(err, closeBounded(ctx, b.gw.Close))
		}
	}
	b.env = append(egress.Env(), brokerEnv...)
	return b, nil
}

// SetRecorders replaces the policy's OnEgress and OnBroker: for a binding
// made before its sandbox had a caller (while a pool built it), whose
// decisions are recorded for the run or session that claims it.
func (b *Binding) SetRecorders(onEgress func(result.EgressEvent), onBroker func(result.BrokerEvent)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onEgress, b.onBroker = onEgress, onBroker
}

func (b *Binding) egressEvent(ev result.EgressEvent) {
	b.mu.Lock()
	on := b.onEgress
	b.mu.Unlock()
	if on != nil {
		on(ev)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.execs {
		l.add(ev)
	}
}

func (b *Binding) brokerEvent(ev result.BrokerEvent) {
	b.mu.Lock()
	on := b.onBroker
	b.mu.Unlock()
	if on != nil {
		on(ev)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.execs {
		l.addBroker(ev)
	}
}

// Exec runs one command in the bound sandbox. Its result holds the egress
// and broker decisions made while it ran (with concurrent execs, each gets
// every decision of their common time). x.Env goes after the proxy and
// broker variables, so the caller's values win.
func (b *Binding) Exec(ctx context.Context, x sandbox.ExecRequest, explain io.Writer) *result.Result {
	log := &netLog{start: time.Now(), live: x.OnEvent, stderr: explain}
	b.mu.Lock()
	b.execs[log] = struct{}{}
	b.mu.Unlock()
	x.Env = append(append([]string(nil), b.env...), x.Env...)
	r := b.sb.Exec(ctx, x)
	b.mu.Lock()
	delete(b.execs, log)
	b.mu.Unlock()
	log.fill(r)
	return r
}

// Close closes the gateway and the broker, bounded in time.
func (b *Binding) Close(ctx context.Context) error {
	var errs []error
	errs = append(errs, closeBounded(ctx, b.gw.Close))
	if b.br != nil {
		errs = append(errs, closeBounded(ctx, b.br.Close))
	}
	return errors.Join(errs...)
}

// closeInto closes the binding while r's exec still listens, so that the
// decisions of connections cut by the close land in r.
func (b *Binding) closeInto(ctx context.Context, r *result.Result, explain io.Writer) {
	log := &netLog{start: time.Now(), stderr: explain}
	log.events, log.broker = r.Egress, r.Broker
	log.dropped, log.bdrop = r.EgressDropped, r.BrokerDropped
	b.mu.Lock()
	b.execs[log] = struct{}{}
	b.mu.Unlock()
	err := b.Close(ctx)
	log.fill(r)
	if err != nil && r.Outcome != result.Error && explain != nil {
		fmt.Fprintf(explain, "airlock: %v\n", err)
	}
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
