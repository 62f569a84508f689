package daemoncmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/advisor"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/httpapi"
	"github.com/airlockhq/airlock/internal/termtext"
)

const policyUsage = `Usage: airlock policy suggest TOOL [flags]

Reads the audit log and prints the narrowest egress and broker config for
TOOL that would have allowed what its runs needed and were refused, and
comments out what it was given and never used: a YAML fragment for the
config file (its header says how it merges). Names are proposed, not
wildcards; --wildcards collapses names under one parent into *.parent and
states how many distinct names each covers. Refusals no entry should
answer (metadata, private addresses, caps) are notes at the end.

Flags:`

// policyCmd is `airlock policy suggest`.
func policyCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] != "suggest" {
		return cli.UsageError(stdio.Stderr, "airlock policy", "the one subcommand is suggest: airlock policy suggest TOOL [--since 7d]")
	}
	fs, tgt, asJSON := daemonFlags("airlock policy suggest", stdio)
	since := fs.String("since", "7d", "read decisions from this time: RFC 3339 or a duration ago (24h, 7d)")
	until := fs.String("until", "", "read decisions before this time: RFC 3339 or a duration ago (default: now)")
	wildcards := fs.Bool("wildcards", false, "collapse names under one parent domain into *.parent, with its cost stated")
	merge := fs.String("merge", "", "print this config file with the suggestion applied, instead of the fragment")
	db := fs.String("db", "", "read this audit log file directly, without the daemon (needs --config)")
	cfgPath := fs.String("config", "", "with --db: the config file the tool is in")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, policyUsage)
		fs.PrintDefaults()
	}
	rest := args[1:]
	var tool string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		tool, rest = rest[0], rest[1:]
	}
	if done, err := cli.ParseFlags(fs, rest, stdio.Stderr); done {
		return err
	}
	if tool == "" && fs.NArg() > 0 {
		tool = fs.Arg(0)
		rest = fs.Args()[1:]
	} else {
		rest = fs.Args()
	}
	switch {
	case tool == "":
		return cli.UsageError(stdio.Stderr, "airlock policy suggest", "name the tool: airlock policy suggest TOOL")
	case len(rest) > 0:
		return cli.UsageError(stdio.Stderr, "airlock policy suggest", "one tool at a time; %q is one too many", rest[0])
	case *db != "" && *cfgPath == "":
		return cli.UsageError(stdio.Stderr, "airlock policy suggest", "--db needs --config: the tool's config now is what the decisions are judged against")
	case *db == "" && *cfgPath != "":
		return cli.UsageError(stdio.Stderr, "airlock policy suggest", "--config goes with --db; through the daemon, its own config is used")
	}
	q := client.PolicySuggestionQuery{Wildcards: *wildcards}
	var err error
	if q.Since, err = when(*since, "--since"); err == nil {
		q.Until, err = when(*until, "--until")
	}
	if err != nil {
		return cli.UsageError(stdio.Stderr, "airlock policy suggest", "%v", err)
	}
	var conf []byte
	if *merge != "" {
		if conf, err = os.ReadFile(*merge); err != nil {
			return fmt.Errorf("airlock policy suggest: %w", err)
		}
	}
	var s *api.PolicySuggestion
	if *db != "" {
		if tgt.remote() {
			return cli.UsageError(stdio.Stderr, "airlock policy suggest", "--db reads a file here, without a daemon; it cannot go with --host")
		}
		c, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if s, err = httpapi.SuggestFromFile(ctx, c, *db, tool, q.Values()); err != nil {
			return err
		}
	} else {
		c, err := tgt.client("airlock policy suggest", stdio.Stderr)
		if err != nil {
			return err
		}
		s, err = c.PolicySuggestion(ctx, tool, q)
		if errors.Is(err, client.ErrNoDaemon) && !tgt.remote() {
			return fmt.Errorf("%w; --db FILE --config FILE read the audit log and config directly", err)
		}
		if err != nil {
			return err
		}
	}
	switch {
	case *asJSON:
		return printJSON(stdio.Stdout, s)
	case conf != nil:
		merged, err := advisor.Merge(conf, []byte(s.YAML))
		if err != nil {
			return fmt.Errorf("airlock policy suggest: merge into %s: %w", *merge, err)
		}
		_, err = stdio.Stdout.Write(merged)
		return err
	}
	// The fragment is made of what sandboxes asked for, rendered safe
	// for YAML; termtext keeps it safe for the terminal too.
	for line := range strings.Lines(s.YAML) {
		if _, err := io.WriteString(stdio.Stdout, termtext.String(strings.TrimSuffix(line, "\n"))+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// when checks a --since or --until value and turns days ("7d"), which
// operators write and Go durations lack, into hours.
func when(s, flag string) (string, error) {
	if s == "" {
		return "", nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= 3650 {
			return strconv.Itoa(n*24) + "h", nil
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return s, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return s, nil
	}
	return "", fmt.Errorf("%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (24h, 7d)", flag, s)
}
