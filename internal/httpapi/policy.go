package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/advisor"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/edge"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
)

// Policy suggestion parameters and bounds.
var suggestParams = []string{"since", "until", "wildcards"}

const (
	// DefaultSuggestSince is the period a suggestion reads by default: a
	// week, long enough to see a tool's weekly jobs.
	DefaultSuggestSince = 7 * 24 * time.Hour
	// MaxSuggestEvents bounds the events one suggestion reads: its work
	// and memory. Past it the suggestion says it is truncated.
	MaxSuggestEvents = 100_000
)

// getPolicySuggestion answers GET /v1/tools/{name}/policy-suggestion: the
// narrowest egress and broker config for the tool that would have
// allowed what its runs needed (internal/advisor).
//
// It reads every recorded decision of the tool, whoever caused it, so it
// is the host's (the local socket) or an auditor token's that may use
// the tool: the same events an auditor reads with GET /v1/audit.
func (d *Server) getPolicySuggestion(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c := edge.CallerOf(r.Context())
	if c == nil {
		edge.WriteErr(w, node.ErrNoCaller)
		return
	}
	if c.Token != nil && !(c.Token.Auditor && c.Allows(name)) {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrDenied, "a policy suggestion reads every decision of tool %q: it takes the daemon's socket, or an auditor token that may use the tool", name))
		return
	}
	conf := d.tools()
	if _, ok := conf.Tools[name]; !ok {
		edge.WriteErr(w, d.noTool(name))
		return
	}
	in, err := parseSuggestQuery(r.URL.Query(), time.Now())
	if err != nil {
		edge.WriteErr(w, errdefs.Errorf(errdefs.ErrInvalid, "%w", err))
		return
	}
	in.Config, in.Tool = conf, name
	ctx := r.Context()
	// One at a time: each reads up to MaxSuggestEvents into memory, and
	// a caller asking many at once must not multiply that.
	select {
	case d.suggesting <- struct{}{}:
		defer func() { <-d.suggesting }()
	case <-ctx.Done():
		return
	}
	_ = d.Audit().Append(ctx) // what is queued is read too
	in.Events, in.Truncated, err = readDecisions(ctx, d.Audit(), name, in.Since, in.Until)
	if err != nil {
		if ctx.Err() == nil {
			d.opts.Logger.Error("audit query failed", "err", err)
			edge.WriteErr(w, errors.New("the audit log could not be read; see the daemon's log"))
		}
		return
	}
	s, err := advisor.Suggest(in)
	if err != nil {
		edge.WriteErr(w, err)
		return
	}
	edge.WriteJSON(w, http.StatusOK, s)
}

// parseSuggestQuery reads the suggestion's parameters: since and until
// as GET /v1/audit takes them (since defaults to a week ago), wildcards
// a boolean.
func parseSuggestQuery(v map[string][]string, now time.Time) (advisor.Input, error) {
	in := advisor.Input{Since: now.Add(-DefaultSuggestSince), Until: now}
	for k, vs := range v {
		known := false
		for _, p := range suggestParams {
			known = known || p == k
		}
		if !known {
			return in, fmt.Errorf("unknown parameter %q (known: %s)", node.Shorten(k), strings.Join(suggestParams, ", "))
		}
		if len(vs) != 1 {
			return in, fmt.Errorf("parameter %q is given %d times", k, len(vs))
		}
		s := vs[0]
		if len(s) > 256 {
			return in, fmt.Errorf("parameter %q is over 256 bytes", k)
		}
		var err error
		switch k {
		case "since":
			in.Since, err = parseWhen(s, now, k)
		case "until":
			in.Until, err = parseWhen(s, now, k)
		case "wildcards":
			if in.Wildcards, err = strconv.ParseBool(s); err != nil {
				err = errors.New(`"wildcards" must be true or false`)
			}
		}
		if err != nil {
			return in, err
		}
	}
	if !in.Until.After(in.Since) {
		return in, errors.New(`"since" must be before "until"`)
	}
	return in, nil
}

// querier is the audit log, or a reader of its file.
type querier interface {
	Query(ctx context.Context, q audit.Query) ([]audit.Event, error)
}

// readDecisions reads tool's egress, DNS and broker events from since to
// until, oldest first, at most MaxSuggestEvents of every kind; truncated
// when there were more.
func readDecisions(ctx context.Context, l querier, tool string, since, until time.Time) ([]api.AuditEvent, bool, error) {
	q := audit.Query{Tool: tool, Since: since, Until: until, Limit: audit.MaxLimit}
	var out []api.AuditEvent
	for read := 0; ; {
		evs, err := l.Query(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, ev := range evs {
			switch ev.Kind {
			case audit.KindEgress, audit.KindDNS, audit.KindBroker:
				out = append(out, ev)
			}
		}
		read += len(evs)
		if len(evs) < q.Limit {
			return out, false, nil
		}
		if read >= MaxSuggestEvents {
			return out, true, nil
		}
		q.After = evs[len(evs)-1].ID
	}
}

// SuggestFromFile makes a policy suggestion from the config conf and the
// audit log file at path, as the daemon would, without one.
func SuggestFromFile(ctx context.Context, conf *config.Config, path, tool string, params map[string][]string) (*api.PolicySuggestion, error) {
	if _, err := conf.Tool(tool); err != nil {
		return nil, err
	}
	in, err := parseSuggestQuery(params, time.Now())
	if err != nil {
		return nil, err
	}
	r, err := audit.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	in.Config, in.Tool = conf, tool
	in.Events, in.Truncated, err = readDecisions(ctx, r, tool, in.Since, in.Until)
	if err != nil {
		return nil, err
	}
	return advisor.Suggest(in)
}
