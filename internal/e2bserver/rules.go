package e2bserver

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
)

// maxRuleHosts bounds a create's network.rules.
const maxRuleHosts = 32

// e2bRules applies a create's network.rules to the tool's broker
// services (docs/e2b.md). E2B's header transforms attach whatever they
// carry to every request for a host; airlock takes one only where it
// narrows what the operator configured: the host must be a service the
// tool brokers transparently (its credential is the operator's, its
// menu holds), and each header one that service's operations forward
// anyway, never a credential (broker.CheckSet). Anything wider is
// refused, by name. It returns the services with the headers set on
// their calls.
func e2bRules(services []*brokerspec.Service, rules map[string][]e2b.NetworkRule) ([]*brokerspec.Service, error) {
	if len(rules) == 0 {
		return services, nil
	}
	if len(rules) > maxRuleHosts {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.rules: at most %d hosts", maxRuleHosts)
	}
	byHost := map[string][]int{}
	var hosts []string
	for i, s := range services {
		if s.Transparent {
			h := strings.ToLower(s.Upstream.Hostname())
			if len(byHost[h]) == 0 {
				hosts = append(hosts, h)
			}
			byHost[h] = append(byHost[h], i)
		}
	}
	out := slices.Clone(services)
	for _, host := range slices.Sorted(maps.Keys(rules)) {
		h := strings.ToLower(strings.TrimSuffix(host, "."))
		at, ok := byHost[h]
		if !ok {
			brokered := "none"
			if len(hosts) > 0 {
				brokered = strings.Join(hosts, ", ")
			}
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.rules: %q: airlock sets headers only on calls it brokers, and this template brokers no service at that host (its transparent services' hosts: %s); a credential for a host belongs in the operator's services, never in a create (docs/e2b.md)", node.Shorten(host), brokered)
		}
		n := 0
		for _, r := range rules[host] {
			if r.Transform != nil {
				n += len(r.Transform.Headers)
			}
		}
		if n > broker.MaxSet || len(rules[host]) > broker.MaxSet {
			return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.rules[%q]: at most %d headers", node.Shorten(host), broker.MaxSet)
		}
		// Every service at the host takes the rule (a host may be
		// served by several, on other ports or base paths).
		for _, i := range at {
			s := services[i]
			set := map[string]string{}
			maps.Copy(set, out[i].Set)
			for _, r := range rules[host] {
				if r.Transform == nil {
					continue
				}
				for _, k := range slices.Sorted(maps.Keys(r.Transform.Headers)) {
					v := r.Transform.Headers[k]
					if err := broker.CheckSet(s, k, v); err != nil {
						return nil, errdefs.Errorf(errdefs.ErrInvalid, "network.rules[%q]: %v", node.Shorten(host), err)
					}
					set[http.CanonicalHeaderKey(k)] = v
				}
			}
			out[i] = s.WithSet(set)
		}
	}
	return out, nil
}
