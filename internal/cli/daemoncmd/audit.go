package daemoncmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/httpapi"
	"github.com/airlockhq/airlock/internal/termtext"
)

// followWait is how long each poll of --follow waits for new events.
const followWait = 30 * time.Second

// auditCmd is `airlock audit`: read (and follow) the daemon's audit log.
func auditCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs, tgt, asJSON := daemonFlags("airlock audit", stdio)
	var q client.AuditQuery
	fs.StringVar(&q.Since, "since", "", "events from this time: RFC 3339 or a duration ago (1h)")
	fs.StringVar(&q.Until, "until", "", "events before this time: RFC 3339 or a duration ago")
	fs.StringVar(&q.Tool, "tool", "", "events of this tool")
	fs.StringVar(&q.Sandbox, "sandbox", "", "events of this sandbox")
	fs.StringVar(&q.Session, "session", "", "events of this session")
	fs.StringVar(&q.Run, "run", "", "events of this run")
	fs.StringVar(&q.Client, "client", "", "events caused by this client (unix:uid=0,pid=N or token:NAME)")
	fs.StringVar(&q.Kind, "kind", "", "events of this kind and the kinds below it (sandbox, run.finished, egress, dns, broker, api.request, ...)")
	fs.StringVar(&q.Decision, "decision", "", "events with this decision (allow, deny) or run outcome (exited, limit, ...)")
	limit := fs.Int("limit", 100, "print at most this many events: the newest, or the oldest from --since (1-1000)")
	db := fs.String("db", "", "read this audit log file directly, without the daemon (e.g. "+config.DefaultAuditPath+")")
	follow := fs.Bool("follow", false, "after the events so far, print new ones as they are recorded, until interrupted")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock audit [flags]\n\nPrints the daemon's audit log, oldest first: one line per event, or one JSON\nobject per line with --json.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return cli.UsageError(stdio.Stderr, "airlock audit", "--limit must be from 1 to 1000")
	}
	q.Limit = *limit
	q.Tail = q.Since == ""
	print := func(evs []api.AuditEvent) error {
		for _, ev := range evs {
			if err := printAudit(stdio.Stdout, ev, *asJSON); err != nil {
				return err
			}
		}
		return nil
	}
	if *db != "" {
		if *follow {
			return cli.UsageError(stdio.Stderr, "airlock audit", "--follow needs the daemon; --db reads the file as it is")
		}
		if tgt.remote() {
			return cli.UsageError(stdio.Stderr, "airlock audit", "--db reads a file here, without a daemon; it cannot go with --host (or $%s)", envHost)
		}
		evs, err := httpapi.ReadAuditFile(ctx, *db, q.Values())
		if err != nil {
			return err
		}
		return print(evs)
	}
	c, err := tgt.client("airlock audit", stdio.Stderr)
	if err != nil {
		return err
	}
	page, err := c.AuditFeed(ctx, q)
	if errors.Is(err, client.ErrNoDaemon) && !tgt.remote() {
		return fmt.Errorf("%w; --db FILE reads the audit log file directly (%s by default)", err, config.DefaultAuditPath)
	}
	if err != nil {
		return err
	}
	// A front names the nodes it could not read; said when that changes.
	var missing string
	unreached := func(p *api.ClusterAuditPage) {
		if now := strings.Join(p.Unreached, ", "); now != missing {
			if missing = now; now != "" {
				fmt.Fprintf(stdio.Stderr, "airlock audit: nodes not read: %s (their events come once they answer)\n", termtext.String(now))
			} else {
				fmt.Fprintln(stdio.Stderr, "airlock audit: every node read again")
			}
		}
	}
	unreached(page)
	if err := print(page.Events); err != nil {
		return err
	}
	if !*follow {
		return nil
	}
	q.Since, q.Tail, q.Limit, q.Wait = "", false, 1000, followWait
	q.Cursor = page.Next
	for {
		page, err := c.AuditFeed(ctx, q)
		if ctx.Err() != nil {
			return nil // interrupted: following ends
		}
		if err != nil {
			return err
		}
		unreached(page)
		if err := print(page.Events); err != nil {
			return err
		}
		q.Cursor = page.Next
	}
}

// printAudit writes one event: a JSON line, or a readable line. What
// an event holds was chosen by callers and sandboxes (an argv, a path,
// a tool's name, a destination), so it is escaped for the terminal
// (termtext): a command line could otherwise rewrite the lines around
// it.
func printAudit(w io.Writer, ev api.AuditEvent, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = w.Write(append(termtext.JSON(b), '\n'))
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-6d %-17s", ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"), ev.ID, termtext.String(ev.Kind))
	if ev.Decision != "" {
		fmt.Fprintf(&b, " %s", termtext.String(ev.Decision))
	}
	for _, f := range []struct{ k, v string }{
		{"node", ev.Node}, {"tool", ev.Tool}, {"sandbox", ev.Sandbox}, {"session", ev.Session}, {"run", ev.Run}, {"client", ev.Client},
	} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.k, termtext.String(f.v))
		}
	}
	if len(ev.Detail) > 0 {
		b.WriteByte(' ')
		b.WriteString(termtext.String(string(ev.Detail)))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
