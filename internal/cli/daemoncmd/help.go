package daemoncmd

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/airlockhq/airlock/docs"
	"github.com/airlockhq/airlock/internal/cli"
)

// helpTopic is where a topic's text is: a file of docs/ and, when only a
// part of it, the headings of its sections.
type helpTopic struct {
	file     string
	sections []string
	about    string
}

// HelpTopics are the topics of `airlock help TOPIC`.
var helpTopics = map[string]helpTopic{
	"config":  {file: "config.md", about: "airlock.yaml: where it is found, every key"},
	"limits":  {file: "config.md", sections: []string{"### limits"}, about: "a tool's ceilings"},
	"egress":  {file: "config.md", sections: []string{"### egress", "### network"}, about: "the destinations a tool may reach, and its network caps"},
	"broker":  {file: "config.md", sections: []string{"## Services and secrets"}, about: "services, operations, credentials and secrets"},
	"server":  {file: "config.md", sections: []string{"## server", "## audit"}, about: "the daemon's socket, TCP, tokens, capacity, audit log"},
	"images":  {file: "images.md", about: "importing, pulling and using images"},
	"mcp":     {file: "mcp.md", about: "MCP tools, the gateway, the built-in tools"},
	"api":     {file: "api.md", about: "the daemon's HTTP API"},
	"e2b":     {file: "e2b.md", about: "the E2B-compatible API: E2B's SDKs and the frameworks on them"},
	"cluster": {file: "cluster.md", about: "nodes on Kubernetes, the front, placement and the audit across nodes"},
}

// helpCmd is `airlock help TOPIC`.
func helpCmd(_ context.Context, args []string, stdio cli.IO) error {
	if len(args) != 1 {
		var names []string
		for n, t := range helpTopics {
			names = append(names, fmt.Sprintf("  %-8s %s", n, t.about))
		}
		sort.Strings(names)
		fmt.Fprintf(stdio.Stdout, "Usage: airlock help TOPIC\n\nTopics:\n%s\n", strings.Join(names, "\n"))
		if len(args) > 1 {
			return &cli.ExitError{Code: cli.ExitUsage}
		}
		return nil
	}
	t, ok := helpTopics[args[0]]
	if !ok {
		return cli.UsageError(stdio.Stderr, "airlock help", "no topic %q (airlock help lists them)", args[0])
	}
	b, err := docs.FS.ReadFile(t.file)
	if err != nil {
		return err
	}
	if len(t.sections) == 0 {
		_, err = stdio.Stdout.Write(b)
		return err
	}
	for _, h := range t.sections {
		s := section(string(b), h)
		if s == "" {
			return fmt.Errorf("docs/%s has no section %q", t.file, h)
		}
		fmt.Fprintln(stdio.Stdout, s)
	}
	return nil
}

// section is the part of a Markdown text from the heading line h to the
// next heading of the same or a higher level.
func section(text, h string) string {
	lines := strings.Split(text, "\n")
	level := strings.Count(strings.Fields(h)[0], "#")
	start := -1
	inCode := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		if start < 0 {
			if l == h {
				start = i
			}
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, "#")); n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
			return strings.TrimRight(strings.Join(lines[start:i], "\n"), "\n")
		}
	}
	if start < 0 {
		return ""
	}
	return strings.TrimRight(strings.Join(lines[start:], "\n"), "\n")
}
