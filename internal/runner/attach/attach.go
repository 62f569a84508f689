// Package attach binds a caller's policy to a sandbox in this process: it
// attaches the egress gateway to the sandbox's network namespace and, when
// the tool uses services, the credential broker, as a runner.Binding's
// network side. The daemon uses it for every run and session, and so does
// airlockd's command line.
//
// It is also where a tool's settings, which package config emits as plain
// values, become what the runtime takes (tool.go): config links none of
// the runtime, and the broker and the image store no config.
package attach

import (
	"context"
	"errors"
	"io"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/runner"
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
	Services []*brokerspec.Service
	Secrets  map[string]*config.Secret
	// Rates are the services' rate limiters, shared by every sandbox
	// bound with this policy (or a copy of it): a tool's rate bounds all
	// its sandboxes on this node together.
	Rates *broker.Rates
	// OnEgress and OnBroker, if set, get every decision made while the
	// policy is bound, whether or not an exec is running (the audit
	// log); unlike a result's lists they are never capped.
	OnEgress func(result.EgressEvent)
	OnBroker func(result.BrokerEvent)
}

// NetworkLimits are a tool's network settings as the egress gateway takes
// them: the one translation, for the daemon and the command line alike.
func NetworkLimits(n config.Network) egress.Limits {
	return egress.Limits{
		Connections:   n.Connections,
		Bytes:         n.Bytes,
		DNSRate:       n.DNSRate,
		WildcardNames: n.WildcardNames,
		NoHostLookups: n.NoHostLookups,
	}
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

// Bind attaches the policy to sb: the egress gateway and, when there are
// services, the credential broker.
func Bind(ctx context.Context, sb *sandbox.Sandbox, p Policy) (*runner.Binding, error) {
	b := runner.NewBinding(sb, p.OnEgress, p.OnBroker)
	n := &gatewayNet{}
	var err error
	gcfg := egress.Config{
		Tool:      p.Tool,
		SandboxID: sb.ID(),
		Policy:    policy.New(p.Egress),
		Limits:    p.Network,
		OnEvent:   b.Egress,
	}
	// The broker first: the gateway hands it the connections to the
	// names it serves transparently.
	if len(p.Services) > 0 {
		n.br, err = broker.Attach(ctx, sb.NetNS(), broker.Config{
			Tool:      p.Tool,
			SandboxID: sb.ID(),
			Services:  p.Services,
			Secrets:   brokerSecrets(p.Services, p.Secrets),
			Rates:     p.Rates,
			OnEvent:   b.Broker,
		})
		if err == nil {
			n.env, err = n.br.Env()
		}
		if err == nil {
			var env []string
			if gcfg.Intercept, env, n.prepare, err = transparent(sb, p.Services, n.br); err == nil {
				n.env = append(n.env, env...)
			}
		}
		if err != nil {
			if n.br != nil {
				err = errors.Join(err, n.br.Close(ctx))
			}
			return nil, err
		}
	}
	n.gw, err = egress.Attach(ctx, sb.NetNS(), gcfg)
	if err != nil {
		if n.br != nil {
			err = errors.Join(err, n.br.Close(ctx))
		}
		return nil, err
	}
	n.env = append(egress.Env(), n.env...)
	b.Attach(n)
	return b, nil
}

// brokerSecrets are the secrets services name, as the broker takes them.
func brokerSecrets(services []*brokerspec.Service, secrets map[string]*config.Secret) map[string]broker.Secret {
	out := make(map[string]broker.Secret, len(services))
	for _, s := range services {
		if sec, ok := secrets[s.Credential.Secret]; ok {
			out[s.Credential.Secret] = sec
		}
	}
	return out
}

// gatewayNet is a gateway and perhaps a broker, as a binding's network
// side.
type gatewayNet struct {
	gw  *egress.Gateway
	br  *broker.Broker
	env []string
	// prepare, when set, writes the trust bundle of transparent
	// brokering into the started sandbox.
	prepare func(context.Context) error
}

// Prepare puts in the started sandbox what its clients need before its
// first command (runner.Preparer).
func (n *gatewayNet) Prepare(ctx context.Context) error {
	if n.prepare == nil {
		return nil
	}
	return n.prepare(ctx)
}

func (n *gatewayNet) Env() []string { return n.env }

// Quiet: nothing reached the gateway, and there is no broker (which reads
// its secrets as long as it is open).
func (n *gatewayNet) Quiet() bool { return n.br == nil && n.gw.Quiet() }

func (n *gatewayNet) Close(ctx context.Context) error {
	err := n.gw.Close(ctx)
	if n.br != nil {
		err = errors.Join(err, n.br.Close(ctx))
	}
	return err
}
