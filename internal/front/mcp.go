package front

import (
	"io"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// mcpSession is the MCP Streamable HTTP transport's session header.
const mcpSession = "Mcp-Session-Id"

// mcp serves /mcp: a new MCP session (no Mcp-Session-Id) goes to a live
// node picked at random, and the session id the node gives is handed to
// the client as "NODE~ID", so that every later request of the session,
// through any front, goes back to that node with the node's own id. The
// tools a session offers are its node's (every node has the same
// config).
func (f *Front) mcp(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(mcpSession)
	var n cluster.Node
	if sid == "" {
		nodes := f.view.Nodes()
		if len(nodes) == 0 {
			writeErr(w, errNoNodeLive)
			return
		}
		n = nodes[rand.IntN(len(nodes))]
	} else {
		name, inner, ok := strings.Cut(sid, "~")
		var live bool
		if ok {
			n, live = f.view.Get(name)
		}
		if !ok || n.Name == "" || !live {
			// Not found: the client starts a new session, as the
			// transport says.
			writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "MCP session %q: no such session on a live node", sid))
			return
		}
		r.Header.Set(mcpSession, inner)
	}
	var body []byte
	if r.Method == http.MethodPost {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, MaxBody+1)); err != nil || len(body) > MaxBody {
			writeErr(w, errdefs.Errorf(errdefs.ErrLimit, "an MCP message over %d MiB, or unreadable", MaxBody>>20))
			return
		}
	}
	resp, err := f.forwardTo(r, n.Endpoint, body)
	if err != nil {
		if notSent(err) {
			f.view.MarkDown(n.Name, downFor)
		}
		f.gone(w, r, n.Name, err)
		return
	}
	if id := resp.Header.Get(mcpSession); id != "" {
		resp.Header.Set(mcpSession, n.Name+"~"+id)
	}
	relay(w, resp, n.Name)
}
