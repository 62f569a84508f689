package config

import (
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
)

// secretRef is a use of a secret's name, by a service's credential.
type secretRef struct {
	name string
	node *yaml.Node
	at   string
}

// serviceRefs are the services a tool names, with where each came from.
type serviceRefs struct {
	tool  *Tool
	nodes []*yaml.Node
	at    string // the tool's services field
}

// toolServices parses a tool's services: distinct service names, checked
// against the services once the whole file is read.
func (p *parser) toolServices(t *Tool, n *yaml.Node, at string) ([]string, error) {
	names, err := p.distinct(n, at, nil)
	if err != nil {
		return nil, err
	}
	items, _ := p.list(n, at) // distinct has checked it is a list
	p.serviceRefs = append(p.serviceRefs, serviceRefs{tool: t, nodes: items, at: at})
	return names, nil
}

// checkRefs checks that every secret and service named is defined, and
// that the services of each tool agree on their environment variables.
func (p *parser) checkRefs(c *Config) error {
	for _, r := range p.secretRefs {
		if _, ok := c.Secrets[r.name]; !ok {
			return p.errAt(r.node, r.at, "undefined secret %s (%s)", quote(r.name), defined("secrets", slices.Collect(maps.Keys(c.Secrets))))
		}
	}
	byTemplate := map[string]string{}
	for _, name := range c.Order {
		t := c.Tools[name]
		for _, tpl := range t.E2BTemplates {
			if other, ok := c.Tools[tpl]; ok && other != t {
				return p.errLine(t.Line, join(join("tools", name), "e2b_templates"), "%s is the name of tool %s (line %d): a template name names one tool", quote(tpl), quote(tpl), other.Line)
			}
			if other, ok := byTemplate[tpl]; ok {
				return p.errLine(t.Line, join(join("tools", name), "e2b_templates"), "%s is also a template name of tool %s: a template name names one tool", quote(tpl), quote(other))
			}
			byTemplate[tpl] = name
		}
		if len(t.Pool.Kernels) > 0 && t.Pool.Warm == 0 && t.Pool.Max == 0 {
			return p.errLine(t.Line, join(join(join("tools", name), "pool"), "kernels"), "kernels are started in pooled sandboxes: set pool.warm (or pool.max) to 1 or more")
		}
	}
	for _, name := range c.MCPServerOrder {
		if t, ok := c.Tools[name]; ok {
			return p.errLine(c.MCPServers[name].Line, join("mcp_servers", name), "%s is also a tool (line %d); token scopes name both, so the names must differ", quote(name), t.Line)
		}
	}
	for _, r := range p.toolRefs {
		_, tool := c.Tools[r.name]
		_, server := c.MCPServers[r.name]
		if !tool && !server {
			return p.errAt(r.node, r.at, "undefined tool or MCP server %s (%s)", quote(r.name), defined("tools", append(slices.Clone(c.Order), c.MCPServerOrder...)))
		}
	}
	if r := p.buildTool; r != nil {
		if _, ok := c.Tools[r.name]; !ok {
			return p.errAt(r.node, r.at, "undefined tool %s (%s)", quote(r.name), defined("tools", c.Order))
		}
	}
	for _, r := range p.serviceRefs {
		// from remembers which service set each variable first.
		from := map[string]*brokerspec.Service{}
		for i, name := range r.tool.Services {
			sub := index(r.at, i)
			s, ok := c.Services[name]
			if !ok {
				return p.errAt(r.nodes[i], sub, "undefined service %s (%s)", quote(name), defined("services", c.ServiceOrder))
			}
			for _, e := range s.Env {
				if toolSets(r.tool, e.Name) {
					continue // the tool's own env wins
				}
				first, ok := from[e.Name]
				if !ok {
					from[e.Name] = s
					continue
				}
				// Two services giving one variable different values
				// would leave the sandbox's value to the order of a
				// list; make the author choose.
				if v := envValue(first.Env, e.Name); v != e.Value || strings.Contains(v, brokerspec.URLPlaceholder) {
					return p.errAt(r.nodes[i], sub, "services %s and %s both set environment variable %s; set it in the tool's env to choose its value",
						quote(first.Name), quote(s.Name), e.Name)
				}
			}
		}
	}
	return nil
}

// defined lists the defined names of a kind for an "undefined" error.
func defined(kind string, names []string) string {
	if len(names) == 0 {
		return "no " + kind + " are defined"
	}
	names = slices.Clone(names)
	slices.Sort(names)
	return "defined " + kind + ": " + strings.Join(names, ", ")
}

// toolSets reports whether the tool's own env sets name.
func toolSets(t *Tool, name string) bool {
	return slices.ContainsFunc(t.Env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// envValue returns the value of name in vars.
func envValue(vars []brokerspec.EnvVar, name string) string {
	for _, v := range vars {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}
