package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultServerTime is the life of an MCP server's sandbox (its
// limits.time) unless the server sets one: it bounds a whole client
// session, not one call.
const DefaultServerTime = time.Hour

var mcpKeys = []string{"builtins"}

// Built-in MCP tools.
const (
	// BuiltinRun is airlock_run: a command of the caller's in a fresh
	// sandbox of a chosen tool profile.
	BuiltinRun = "run"
	// BuiltinSession is the airlock_session_* tools: one dedicated
	// sandbox per MCP session, for execs and files.
	BuiltinSession = "session"
)

// MCP configures airlock's own MCP tools.
type MCP struct {
	// Builtins lists the built-in tools this deployment offers (run,
	// session); none by default.
	Builtins []string
}

// HasBuiltin reports whether a built-in is enabled.
func (m MCP) HasBuiltin(name string) bool {
	for _, b := range m.Builtins {
		if b == name {
			return true
		}
	}
	return false
}

func (p *parser) mcp(n *yaml.Node, c *Config) error {
	fs, err := p.fields(n, "mcp", "a mapping of MCP settings", mcpKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join("mcp", f.name)
		c.MCP.Builtins, err = p.distinct(f.val, sub, func(s string) string {
			if s != BuiltinRun && s != BuiltinSession {
				return "want run or session"
			}
			return ""
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// mcpServers parses mcp_servers: tool profiles whose command is an MCP
// server on stdio, without inputs.
func (p *parser) mcpServers(n *yaml.Node, c *Config) error {
	fs, err := p.fields(n, "mcp_servers", "a mapping of MCP server names to their settings", nil)
	if err != nil {
		return err
	}
	for _, f := range fs {
		at := join("mcp_servers", f.name)
		t, err := p.tool(f, "mcp_servers")
		if err != nil {
			return err
		}
		switch {
		case len(t.Command) == 0:
			return p.errAt(f.val, at, "an MCP server needs a command")
		case len(t.Inputs) > 0 || t.Stdin != "":
			return p.errAt(f.val, at, "an MCP server takes no inputs or stdin; its tools declare their own")
		}
		if t.Limits.Time == nil {
			d := DefaultServerTime
			t.Limits.Time = &d
		}
		c.MCPServers[t.Name] = t
		c.MCPServerOrder = append(c.MCPServerOrder, t.Name)
	}
	return nil
}

// Argv is the command of a tool without inputs, as it runs.
func (t *Tool) Argv() []string {
	var out []string
	for _, a := range t.Command {
		out = append(out, a.Parts[0])
	}
	return out
}

// Profiles are the tools and then the MCP servers: every sandbox profile
// of the config.
func (c *Config) Profiles() []*Tool {
	var out []*Tool
	for _, name := range c.Order {
		out = append(out, c.Tools[name])
	}
	for _, name := range c.MCPServerOrder {
		out = append(out, c.MCPServers[name])
	}
	return out
}
