package front

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// maxAuditWait bounds a follow's wait, as a node's.
const maxAuditWait = time.Minute

// audit serves GET /v1/audit across the nodes: each node's page from
// the cursor's place for it, merged by time (then node and id), the
// first limit taken (the newest with tail). Each event appears once:
// the cursor moves past what was taken only. A node's query rules apply
// (a token reads only the events it caused, an auditor its tools' too):
// each node is asked with the caller's own token, never a wider one.
func (f *Front) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cur, err := parseCursor(q.Get("after"))
	if err != nil {
		writeErr(w, err)
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "limit %q: want 1 to 1000", v))
			return
		}
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > maxAuditWait {
			writeErr(w, errdefs.Errorf(errdefs.ErrInvalid, "wait %q: want a duration up to %v", v, maxAuditWait))
			return
		}
	}
	tail := q.Get("tail") == "true"
	q.Del("after")
	q.Del("wait")
	deadline := time.Now().Add(wait)
	for {
		page, err := f.auditOnce(r, q, cur, limit, tail)
		if err != nil {
			writeErr(w, err)
			return
		}
		if len(page.Events) > 0 || wait == 0 || time.Now().After(deadline) || r.Context().Err() != nil {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(page)
			return
		}
		// Following: the nodes are asked again shortly (a node's own
		// wait would hold this front on one node while another has
		// news).
		select {
		case <-r.Context().Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// auditOnce reads one merged page; the error is a node's refusal of the
// query (ErrInvalid: the caller's error).
func (f *Front) auditOnce(r *http.Request, q url.Values, cur map[string]int64, limit int, tail bool) (api.ClusterAuditPage, error) {
	type answer struct {
		node string
		page api.AuditPage
		err  error
	}
	nodes := f.view.Nodes()
	answers := make([]answer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			a := answer{node: n.Name}
			nq := url.Values{}
			for k, v := range q {
				nq[k] = v
			}
			if id := cur[n.Name]; id > 0 {
				nq.Set("after", strconv.FormatInt(id, 10))
			}
			nq.Set("limit", strconv.Itoa(limit))
			a.page, a.err = f.nodeAudit(r, n, nq)
			answers[i] = a
		})
	}
	wg.Wait()
	out := api.ClusterAuditPage{Events: []api.AuditEvent{}}
	var pages [][]api.AuditEvent
	for _, a := range answers {
		if errdefs.IsInvalid(a.err) {
			return out, a.err
		}
		if a.err != nil {
			f.logger.Warn("front: a node's audit log could not be read", "node", a.node, "err", a.err)
			out.Unreached = append(out.Unreached, a.node)
			continue
		}
		evs := make([]api.AuditEvent, len(a.page.Events))
		for i, ev := range a.page.Events {
			ev.Node = a.node
			evs[i] = ev
		}
		pages = append(pages, evs)
	}
	out.Events = mergePages(pages, limit, tail)
	next := map[string]int64{}
	for k, v := range cur {
		next[k] = v
	}
	for _, ev := range out.Events {
		next[ev.Node] = max(next[ev.Node], ev.ID)
	}
	if tail {
		// Following a tail goes on after the newest of every node read.
		for _, a := range answers {
			if a.err == nil {
				next[a.node] = max(next[a.node], a.page.Next)
			}
		}
	}
	out.Next = formatCursor(next)
	return out, nil
}

// byTime orders merged events: by time, then node and id.
func byTime(a, b api.AuditEvent) int {
	return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
}

// mergePages takes at most limit events of the nodes' pages (each in id
// order), the earliest (the latest with tail), and returns them in time
// order. What it takes of each node is a prefix of its page (a suffix
// with tail): the cursor keeps the last id taken of each node, and a
// node's times are not in id order (a request's event has the time it
// began and the id of when it ended), so taking by time alone could take
// an event past one it leaves, which the cursor then passed over for
// good.
func mergePages(pages [][]api.AuditEvent, limit int, tail bool) []api.AuditEvent {
	out := []api.AuditEvent{}
	for len(out) < limit {
		best := -1
		for i, p := range pages {
			if len(p) == 0 {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			if tail && byTime(p[len(p)-1], pages[best][len(pages[best])-1]) > 0 ||
				!tail && byTime(p[0], pages[best][0]) < 0 {
				best = i
			}
		}
		if best < 0 {
			break
		}
		p := pages[best]
		if tail {
			out, pages[best] = append(out, p[len(p)-1]), p[:len(p)-1]
		} else {
			out, pages[best] = append(out, p[0]), p[1:]
		}
	}
	slices.SortFunc(out, byTime)
	return out
}

// nodeAudit reads one node's page; an ErrInvalid when the node refused
// the query itself (400).
func (f *Front) nodeAudit(r *http.Request, n cluster.Node, q url.Values) (api.AuditPage, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(n.Endpoint, "/")+"/v1/audit?"+q.Encode(), nil)
	if err != nil {
		return api.AuditPage{}, err
	}
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	resp, err := f.hc.Do(req)
	if err != nil {
		return api.AuditPage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		err := fmt.Errorf("node %s: %d %s", n.Name, resp.StatusCode, e.Message)
		if resp.StatusCode == http.StatusBadRequest {
			err = errdefs.Errorf(errdefs.ErrInvalid, "%w", err)
		}
		return api.AuditPage{}, err
	}
	var p api.AuditPage
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return api.AuditPage{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return p, nil
}

// The cursor is "node:id,node:id…", base64url: opaque to callers.
func formatCursor(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

func parseCursor(s string) (map[string]int64, error) {
	m := map[string]int64{}
	if s == "" {
		return m, nil
	}
	bad := errdefs.Errorf(errdefs.ErrInvalid, "after %q is not a cursor a front gave", s)
	if len(s) > 64<<10 {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	if len(b) == 0 {
		return m, nil
	}
	for _, part := range strings.Split(string(b), ",") {
		name, id, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(id, 10, 64)
		if !ok || err != nil || n < 0 || name == "" {
			return nil, bad
		}
		m[name] = n
	}
	return m, nil
}
