package edge

import (
	"context"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/node"
)

// Defences of the listeners against callers that flood them: timeouts and
// caps so that idle or slow connections cannot pile up (internal/httpx:
// a header, a body, an idle connection each bounded in time), a
// connection cap on TCP with a share per remote address under pressure
// (netlimit.Network), refusals recorded once per client and interval
// rather than once each, and a client that keeps failing authentication
// slowed down.

const (
	// refusalWindow is the interval refusals are summed over: a client's
	// first refusal in it is recorded at once, the rest as one count.
	refusalWindow = 10 * time.Second
	// maxRefusalClients bounds the clients tracked at once; past it, all
	// others share one entry (a flood from many addresses cannot grow
	// the table without bound).
	maxRefusalClients = 4096
	// failBurst authentication failures a client may make at once, and
	// failRefill more per second, before each further failure is held
	// for failHold and answered 429 on a closed connection.
	failBurst  = 20
	failRefill = 2
	failHold   = time.Second
)

// refusals sums each client's refused requests (401, 403, 421 and the
// 429s of a client that keeps failing) over refusalWindow.
type refusals struct {
	mu      sync.Mutex // guards clients and every entry in it
	clients map[string]*refused
}

type refused struct {
	count  int // refusals after the first, not yet recorded
	status int // the last one's status
	path   string
	// tokens and last are the client's authentication-failure bucket.
	tokens float64
	last   time.Time
}

// ClientKey is who a refusal is counted against: a TCP peer's address
// without its port (a flood opens many connections), the socket's peer
// as the audit log names it.
func ClientKey(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return "tcp:" + ap.Addr().String()
	}
	return ClientOf(r)
}

// entry returns key's entry, or the shared one past maxRefusalClients.
// The caller holds rf.mu.
func (rf *refusals) entry(key string) *refused {
	if rf.clients == nil {
		rf.clients = map[string]*refused{}
	}
	e := rf.clients[key]
	if e == nil {
		if len(rf.clients) >= maxRefusalClients {
			key = "others"
			if e = rf.clients[key]; e != nil {
				return e
			}
		}
		e = &refused{tokens: failBurst, last: time.Now()}
		rf.clients[key] = e
	}
	return e
}

// note counts a refusal of key; first says it is the client's first in
// this window, to be recorded and logged now.
func (rf *refusals) note(key string, status int, path string) (first bool) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	e := rf.entry(key)
	if e.status == 0 {
		e.status = status
		return true
	}
	e.count++
	e.status, e.path = status, path
	return false
}

// failed takes one authentication failure from key's bucket and reports
// whether the bucket was empty (the client fails faster than allowed).
func (rf *refusals) failed(key string) (over bool) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	e := rf.entry(key)
	now := time.Now()
	e.tokens = min(failBurst, e.tokens+now.Sub(e.last).Seconds()*failRefill)
	e.last = now
	if e.tokens < 1 {
		return true
	}
	e.tokens--
	return false
}

// flush records, per client, the refusals after its first in the window
// that ended, as one event with their count, and forgets clients that
// were quiet.
func (g *Guard) FlushRefusals() {
	rf := &g.refusals
	rf.mu.Lock()
	var evs []audit.Event
	now := time.Now()
	for key, e := range rf.clients {
		if e.count > 0 {
			evs = append(evs, audit.Event{Kind: audit.KindAPI, Time: now, Client: key, Decision: audit.Deny,
				Detail: audit.Detail(map[string]any{"repeated": e.count, "status": e.status, "last_path": node.Shorten(e.path), "window_s": int(refusalWindow / time.Second)})})
		}
		// A client with a spent bucket stays, so that its bucket is not
		// refilled by forgetting it.
		if e.tokens >= failBurst-1 || now.Sub(e.last) > refusalWindow {
			delete(rf.clients, key)
		} else {
			e.count, e.status, e.path = 0, 0, ""
		}
	}
	rf.mu.Unlock()
	for _, ev := range evs {
		g.node.Audit().Record(ev)
		g.logger.Warn("refused API requests", "client", ev.Client, "detail", string(ev.Detail))
	}
}

// RefusalFlusher flushes every refusalWindow until ctx ends, and once more
// then.
func (g *Guard) RefusalFlusher(ctx context.Context) {
	t := time.NewTicker(refusalWindow)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			g.FlushRefusals()
		case <-ctx.Done():
			g.FlushRefusals()
			return
		}
	}
}

// SlowFailures answers a caller that fails authentication faster than
// failRefill a second (after a burst of failBurst) Only after failHold,
// with 429, on a connection it then closes: a flood of wrong tokens costs
// its sender a second and a new connection per try, and the daemon one
// sleeping goroutine.
func (g *Guard) SlowFailures(w http.ResponseWriter, r *http.Request) bool {
	if !g.refusals.failed(ClientKey(r)) {
		return false
	}
	select {
	case <-time.After(failHold):
	case <-r.Context().Done():
	}
	w.Header().Set("Connection", "close")
	WriteErr(w, &refusal{Kind: node.ErrTooMany, RetryAfter: int(failHold / time.Second), Msg: "too many requests without a valid token; slow down"})
	return true
}
