// Package runner runs commands in a sandbox that has been created (or
// claimed from a pool) with its network side bound to it: whatever serves
// the sandbox's network namespace (Net: the egress gateway and, when the
// tool uses services, the credential broker; see internal/runner/attach,
// or a gateway started on first use, internal/lazygw). It runs the
// command, closes the network side, and returns the result with every
// egress and broker decision in it. The CLI and the daemon both use it;
// creating and destroying the sandbox stay with them.
//
// It links nothing of the gateway or broker themselves, so that airlock's
// small command line can use it (see internal/deptest).
package runner

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/internal/termtext"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// Net is what a binding attaches to a sandbox's network namespace.
type Net interface {
	// Env is what it adds to the commands' environment (the proxy's and
	// the broker's variables).
	Env() []string
	// Quiet reports that nothing has reached it from the sandbox, and
	// that closing it can add nothing to a result.
	Quiet() bool
	// Close closes it, bounded by ctx; decisions it makes while closing
	// (connections it cuts) still reach the binding.
	Close(ctx context.Context) error
}

// Preparer is a network side with something to put in the sandbox once
// it has started and before its first command (a trust bundle): the
// binding calls Prepare once, before that command.
type Preparer interface {
	Prepare(ctx context.Context) error
}

// NewBinding makes the binding of one sandbox. Its network side, which
// sends its decisions to the binding's Egress and Broker, is attached
// with Attach before any command runs. onEgress and onBroker, if set, get
// every decision made while the binding lives, whether or not an exec is
// running (the audit log); unlike a result's lists they are never capped.
func NewBinding(sb *sandbox.Sandbox, onEgress func(result.EgressEvent), onBroker func(result.BrokerEvent)) *Binding {
	return &Binding{sb: sb, execs: make(map[*netLog]struct{}), onEgress: onEgress, onBroker: onBroker, shown: &explained{}}
}

// Attach gives the binding its network side.
func (b *Binding) Attach(n Net) {
	b.net = n
	b.env = n.Env()
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
// binding closes: when nothing has reached the network side (Net.Quiet),
// closing it could add nothing to the result, and it is left to
// the returned close, for after the answer. Otherwise it closes at once,
// as Run does, and the returned close does nothing. Either way the caller
// calls it.
func (b *Binding) RunCloseLater(ctx context.Context, x sandbox.ExecRequest, explain io.Writer) (*result.Result, func(context.Context) error) {
	r := b.Exec(ctx, x, explain)
	if b.net.Quiet() {
		return r, b.Close
	}
	b.closeInto(ctx, r, explain)
	return r, func(context.Context) error { return nil }
}

// Binding is a policy bound to one sandbox for as long as it lives: the
// network side stays open across execs (a session's).
type Binding struct {
	sb  *sandbox.Sandbox
	net Net      // set by Attach, before any command runs
	env []string // likewise

	// mu guards onEgress, onBroker and execs. It is held while an event
	// goes to the execs, and so taken before a netLog's mu.
	mu       sync.Mutex
	onEgress func(result.EgressEvent)
	onBroker func(result.BrokerEvent)
	execs    map[*netLog]struct{} // the execs running now get the events
	// shown are the denials explained already, by any of the binding's
	// logs: a resolver's retry that lands while the binding closes is
	// not explained twice.
	shown *explained

	// prepared makes Prepare run once; prepErr is its error.
	prepared sync.Once
	prepErr  error
}

// SetRecorders replaces the policy's OnEgress and OnBroker: for a binding
// made before its sandbox had a caller (while a pool built it), whose
// decisions are recorded for the run or session that claims it.
func (b *Binding) SetRecorders(onEgress func(result.EgressEvent), onBroker func(result.BrokerEvent)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onEgress, b.onBroker = onEgress, onBroker
}

// Egress takes one decision of the egress gateway.
func (b *Binding) Egress(ev result.EgressEvent) {
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

// Broker takes one decision of the broker.
func (b *Binding) Broker(ev result.BrokerEvent) {
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

// Env is what the binding adds to every command's environment (the
// egress gateway's and the broker's variables).
func (b *Binding) Env() []string { return b.env }

// Exec runs one command in the bound sandbox. Its result holds the egress
// and broker decisions made while it ran (with concurrent execs, each gets
// every decision of their common time). x.Env goes after the proxy and
// broker variables, so the caller's values win.
func (b *Binding) Exec(ctx context.Context, x sandbox.ExecRequest, explain io.Writer) *result.Result {
	if p, ok := b.net.(Preparer); ok {
		b.prepared.Do(func() { b.prepErr = p.Prepare(ctx) })
		if b.prepErr != nil {
			return &result.Result{SandboxID: b.sb.ID(), Outcome: result.Error, Error: b.prepErr.Error()}
		}
	}
	log := &netLog{start: time.Now(), live: x.OnEvent, stderr: explain, shown: b.shown}
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

// Window collects the decisions made from now until stop is called, into
// the result stop returns (its Egress and Broker and their drop counts):
// for work that is no exec of its own, code run by a resident kernel,
// whose caller reads which of its connections were refused.
func (b *Binding) Window() (stop func() *result.Result) {
	log := &netLog{start: time.Now(), shown: b.shown}
	b.mu.Lock()
	b.execs[log] = struct{}{}
	b.mu.Unlock()
	return func() *result.Result {
		b.mu.Lock()
		delete(b.execs, log)
		b.mu.Unlock()
		r := &result.Result{SandboxID: b.sb.ID()}
		log.fill(r)
		return r
	}
}

// Close closes the network side, bounded in time so that a stuck
// connection cannot hold the run's end.
func (b *Binding) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return b.net.Close(ctx)
}

// closeInto closes the binding while r's exec still listens, so that the
// decisions of connections cut by the close land in r.
func (b *Binding) closeInto(ctx context.Context, r *result.Result, explain io.Writer) {
	log := &netLog{start: time.Now(), stderr: explain, shown: b.shown}
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

// netLog collects a run's egress and broker events for the result and,
// when asked, passes them on live.
type netLog struct {
	start  time.Time
	live   func(result.Event)
	stderr io.Writer

	// mu guards events, dropped, broker and bdrop: the gateway's and
	// the broker's decisions arrive on their own goroutines.
	mu      sync.Mutex
	events  []result.EgressEvent
	dropped int
	broker  []result.BrokerEvent
	bdrop   int
	shown   *explained
}

// explained counts the denials explained, and remembers which.
type explained struct {
	mu   sync.Mutex // guards n and seen
	n    int
	seen map[string]bool
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
	// The line says who decides (internal/refusal): an agent reading
	// the CLI's stderr learns that a retry is refused the same way.
	verb := "denied"
	if !refusal.Policy(ev.Code) {
		verb = "failed"
	}
	l.explain(ev.Kind+" "+ev.Destination+" "+ev.Reason, fmt.Sprintf("egress %s (%s): %s: %s; %s", verb, ev.Kind, ev.Destination, ev.Reason, refusal.EgressRule(ev.Code)))
}

func (l *netLog) explainBroker(ev *result.BrokerEvent) {
	l.explain("broker "+ev.Method+" "+ev.Service+ev.Path+" "+ev.Reason, fmt.Sprintf("broker refused %s %s%s: %s; %s", ev.Method, ev.Service, ev.Path, ev.Reason, refusal.BrokerRule(ev.Code)))
}

// Explainer returns a function that prints on w one line per distinct
// egress or broker denial among the events it is given, as Run does with
// Request.Explain. The CLI uses it for runs streamed from the daemon.
func Explainer(w io.Writer) func(result.Event) {
	l := &netLog{stderr: w, shown: &explained{}}
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
	e := l.shown
	e.mu.Lock()
	show := e.n <= maxShownDenials && !e.seen[key]
	if show {
		if e.seen == nil {
			e.seen = map[string]bool{}
		}
		e.seen[key] = true
		e.n++
	}
	n := e.n
	e.mu.Unlock()
	switch {
	case !show:
	case n > maxShownDenials:
		fmt.Fprintln(l.stderr, "airlock: further denials not shown")
	default:
		// A denial quotes what the sandbox asked for (a name, a path):
		// escaped, so that it cannot act on the terminal.
		fmt.Fprintln(l.stderr, "airlock: "+termtext.String(line))
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
