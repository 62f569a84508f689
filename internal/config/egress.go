package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/egress/policy"
)

// egress parses the egress list. Each item is a host spec string, as in
// "api.github.com" or "*.example.com:443", or a mapping with host, ports,
// addresses and private.
func (p *parser) egress(n *yaml.Node, at string) ([]policy.Destination, error) {
	items, err := p.list(n, at)
	if err != nil {
		return nil, err
	}
	var out []policy.Destination
	for i, item := range items {
		sub := index(at, i)
		var d policy.Destination
		if item.Kind == yaml.MappingNode {
			d, err = p.egressMapping(item, sub)
		} else {
			var host string
			if host, err = p.str(item, sub); err == nil {
				d, err = policy.Compile(policy.Spec{Host: host})
				if err != nil {
					err = p.wrapAt(item, sub, err)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// specNodes remembers where each part of a Spec came from, to place a
// Compile error.
type specNodes struct {
	item, host *yaml.Node
	hostField  string // the key host came from: "host", or a service's "upstream"
	ports      []*yaml.Node
	addresses  []*yaml.Node
}

// egressMapping parses one egress item written as a mapping.
func (p *parser) egressMapping(item *yaml.Node, at string) (policy.Destination, error) {
	var (
		spec    policy.Spec
		where   = specNodes{item: item, hostField: "host"}
		hasHost bool
	)
	fs, err := p.fields(item, at, "a mapping", egressKeys)
	if err != nil {
		return policy.Destination{}, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "host":
			spec.Host, err = p.str(f.val, sub)
			where.host, hasHost = f.val, true
		case "private":
			spec.Private, err = p.boolean(f.val, sub)
		case "opaque":
			spec.Opaque, err = p.boolean(f.val, sub)
		case "ports":
			spec.Ports, where.ports, err = p.ports(f.val, sub)
		case "addresses":
			spec.Addresses, where.addresses, err = p.addresses(f.val, sub)
		}
		if err != nil {
			return policy.Destination{}, err
		}
	}
	if !hasHost {
		return policy.Destination{}, p.errAt(item, at, `missing required field "host"`)
	}
	d, err := policy.Compile(spec)
	if err != nil {
		n, path := blame(spec, where, at)
		return policy.Destination{}, p.wrapAt(n, path, err)
	}
	return d, nil
}

// ports reads the ports of an egress mapping, with their nodes.
func (p *parser) ports(n *yaml.Node, at string) ([]int, []*yaml.Node, error) {
	ns, err := p.nonEmptyList(n, at)
	if err != nil {
		return nil, nil, err
	}
	var out []int
	for i, pn := range ns {
		v, err := p.integer(pn, index(at, i), 1, 65535)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, int(v))
	}
	return out, ns, nil
}

// addresses reads the addresses of an egress mapping, with their nodes.
func (p *parser) addresses(n *yaml.Node, at string) ([]string, []*yaml.Node, error) {
	ns, err := p.nonEmptyList(n, at)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	for i, an := range ns {
		s, err := p.str(an, index(at, i))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, s)
	}
	return out, ns, nil
}

// nonEmptyList is list for ports and addresses, where an empty list is
// refused: it could mean "none" or "the default", and neither reading is
// safe to guess.
func (p *parser) nonEmptyList(n *yaml.Node, at string) ([]*yaml.Node, error) {
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 || isNull(n) {
		return nil, p.errAt(n, at, "must not be empty; leave the field out for the default")
	}
	return p.list(n, at)
}

// blame finds the part of a Spec that Compile refused, by compiling the
// host alone, then the host with each port, then the host with each
// address, each time with the Spec's Private. If each part is fine alone
// the combination is at fault and the whole item is blamed.
func blame(spec policy.Spec, where specNodes, at string) (*yaml.Node, string) {
	if _, err := policy.Compile(policy.Spec{Host: spec.Host, Private: spec.Private}); err != nil {
		return where.host, join(at, where.hostField)
	}
	for i, port := range spec.Ports {
		if _, err := policy.Compile(policy.Spec{Host: spec.Host, Ports: []int{port}, Private: spec.Private}); err != nil {
			return where.ports[i], index(join(at, "ports"), i)
		}
	}
	for i, a := range spec.Addresses {
		if _, err := policy.Compile(policy.Spec{Host: spec.Host, Addresses: []string{a}, Private: spec.Private}); err != nil {
			return where.addresses[i], index(join(at, "addresses"), i)
		}
	}
	return where.item, at
}
