package front

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/netlimit"
)

// The E2B-compatible API of a cluster (docs/e2b.md, docs/cluster.md): a
// front serves it on its own server.e2b and passes each call to the
// E2B API of a node. Creating a sandbox is placed as a session is (its
// template is the tool); every other call goes to the node its sandbox
// id names, found in the path or in the E2b-Sandbox-Id header of the
// sandbox-side calls. Signed file URLs name no sandbox: the nodes are
// asked in turn, and only the one whose sandbox signed the URL accepts
// it. API keys are checked here and again at the node; the sandbox-side
// calls' access tokens are the node's to check.

// maxE2BBody bounds the body of a sandbox's creation, which the front
// holds to place it (and to place it again elsewhere when a node cannot
// be reached): a node's own bound on a control-plane body. Nothing else
// is held: a file's bytes stream through.
const maxE2BBody = 1 << 20

// E2BHandler is the front's E2B-compatible API.
func (f *Front) E2BHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", f.e2bHealth)
	mux.HandleFunc("POST /v2/sandboxes", f.e2bKey(f.e2bCreate))
	mux.HandleFunc("GET /v2/sandboxes", f.e2bKey(f.e2bList))
	// The v1 forms older SDKs call (connect is among the calls by id).
	mux.HandleFunc("POST /sandboxes", f.e2bKey(f.e2bCreate))
	mux.HandleFunc("GET /sandboxes", f.e2bKey(f.e2bList))
	mux.HandleFunc("/v2/sandboxes/{id}/{rest...}", f.e2bKey(f.e2bByID))
	mux.HandleFunc("/sandboxes/{id}", f.e2bKey(f.e2bByID))
	mux.HandleFunc("/sandboxes/{id}/{rest...}", f.e2bKey(f.e2bByID))
	mux.HandleFunc("/files", f.e2bFiles)
	mux.HandleFunc("/", f.e2bEnvd)
	return mux
}

// e2bKey admits a lifecycle call with a valid API key only.
func (f *Front) e2bKey(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-API-KEY"); v == "" || f.tokens().Match(v) == nil {
			writeE2BErr(w, errdefs.New(errUnauthenticated, "a valid API key is required (X-API-KEY: an airlock token)"))
			return
		}
		netlimit.Vouch(r.Context())
		h(w, r)
	}
}

// e2bNodes are the live nodes serving the E2B API.
func (f *Front) e2bNodes() []cluster.Node {
	var out []cluster.Node
	for _, n := range f.view.Nodes() {
		if n.E2B != "" {
			out = append(out, n)
		}
	}
	return out
}

// e2bCreate places a new sandbox as a session is (sendPlaced): its
// template is the tool, and only nodes serving the E2B API are given it.
func (f *Front) e2bCreate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxE2BBody+1))
	if err != nil || len(body) > maxE2BBody {
		writeE2BErr(w, errdefs.Errorf(errdefs.ErrInvalid, "the request body could not be read, or is over %d MiB", maxE2BBody>>20))
		return
	}
	var req struct {
		TemplateID string `json:"templateID"`
	}
	if json.Unmarshal(body, &req) != nil || req.TemplateID == "" {
		req.TemplateID = "" // the node explains the body's fault
	}
	resp, n, err := f.sendPlaced(r, req.TemplateID, body, func(n cluster.Node) string { return n.E2B })
	if err != nil {
		var none *noNode
		if errors.As(err, &none) {
			// Unlike a run's tool, a template no node has is not told
			// from one no live node serves: both are 503.
			writeE2BErr(w, errdefs.Errorf(errdefs.ErrUnavailable, "no live node serves template %q", req.TemplateID))
			return
		}
		writeE2BErr(w, errdefs.Errorf(errNodeFailed, "node %s failed the call", n.Name))
		return
	}
	relay(w, resp, n.Name)
}

// e2bNodeOf is the live node that serves sandbox id's E2B API; an error
// (not found, or its node gone) when there is none.
func (f *Front) e2bNodeOf(id string) (cluster.Node, error) {
	name := cluster.NodeOfID(id)
	if name == "" {
		return cluster.Node{}, errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	n, live := f.view.Get(name)
	if n.Name == "" || !live || n.E2B == "" {
		return cluster.Node{}, errdefs.Errorf(errNodeGone, "sandbox %s ended: its node %s is gone", id, name)
	}
	return n, nil
}

// e2bPass passes r to the E2B API of sandbox id's node; the error when
// it has none, or could not answer.
func (f *Front) e2bPass(w http.ResponseWriter, r *http.Request, id string) error {
	n, err := f.e2bNodeOf(id)
	if err != nil {
		return err
	}
	resp, err := f.forwardTo(r, n.E2B, nil)
	if err != nil {
		return f.e2bSendErr(r, n, id, err)
	}
	relay(w, resp, n.Name)
	return nil
}

// e2bSendErr is the error of a call on sandbox id that its node n
// failed (err): the sandbox ended when nothing answers there (the node
// is marked down), else the node failed the call; nil when the caller
// went away (no one to answer).
func (f *Front) e2bSendErr(r *http.Request, n cluster.Node, id string, err error) error {
	if r.Context().Err() != nil {
		return nil
	}
	if notSent(err) || unreachable(n.E2B) {
		f.view.MarkDown(n.Name, downFor)
		return errdefs.Errorf(errNodeGone, "sandbox %s ended: its node %s is gone", id, n.Name)
	}
	return errdefs.Errorf(errNodeFailed, "node %s failed the call", n.Name)
}

func (f *Front) e2bByID(w http.ResponseWriter, r *http.Request) {
	if err := f.e2bPass(w, r, r.PathValue("id")); err != nil {
		writeE2BErr(w, err)
	}
}

// e2bList lists the sandboxes of every node, a node at a time, in the
// order of their names: a page holds one node's page, and x-next-token
// says where the next one starts (that node's own token, or the next
// node). The SDK's pages need no order across them.
func (f *Front) e2bList(w http.ResponseWriter, r *http.Request) {
	node, inner, err := parseListCursor(r.URL.Query().Get("nextToken"))
	if err != nil {
		writeE2BErr(w, err)
		return
	}
	nodes := f.e2bNodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i, n := range nodes {
		if n.Name < node {
			continue
		}
		q := r.URL.Query()
		q.Del("nextToken")
		if n.Name == node && inner != "" {
			q.Set("nextToken", inner)
		}
		out := r.Clone(r.Context())
		out.URL.RawQuery = q.Encode()
		resp, err := f.forwardTo(out, n.E2B, []byte{})
		if err != nil {
			writeE2BErr(w, errdefs.Errorf(errNodeFailed, "node %s could not be asked for its sandboxes", n.Name))
			return
		}
		var items []json.RawMessage
		err = json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&items)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			writeE2BErr(w, &nodeStatus{status: resp.StatusCode, msg: fmt.Sprintf("node %s refused the list", n.Name)})
			return
		}
		next := ""
		if t := resp.Header.Get("X-Next-Token"); t != "" {
			next = listCursor(n.Name, t)
		} else if i+1 < len(nodes) {
			next = listCursor(nodes[i+1].Name, "")
		}
		if len(items) == 0 && next != "" && resp.Header.Get("X-Next-Token") == "" {
			node, inner = nodes[i+1].Name, ""
			continue // an empty node: on to the next at once
		}
		if next != "" {
			w.Header().Set("X-Next-Token", next)
		}
		w.Header().Set("Content-Type", "application/json")
		if items == nil {
			items = []json.RawMessage{}
		}
		_ = json.NewEncoder(w).Encode(items)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("[]\n"))
}

// listCursor is a front's x-next-token: the node to go on at and that
// node's own token ("" from its start).
func listCursor(node, inner string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(node + "\x00" + inner))
}

func parseListCursor(s string) (node, inner string, err error) {
	if s == "" {
		return "", "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	node, inner, ok := strings.Cut(string(b), "\x00")
	if err != nil || !ok || node == "" || len(s) > 1024 {
		return "", "", errdefs.Errorf(errdefs.ErrInvalid, "nextToken %q is not one a front gave", s)
	}
	return node, inner, nil
}

// e2bHealth passes envd's health check (the SDK's isRunning) to the node
// of its E2b-Sandbox-Id, which says whether the sandbox lives; a sandbox
// no live node holds is answered 502 here, as gone (the SDK's "not
// running"), never 204. A check naming no sandbox is the listener's
// probe: 204.
func (f *Front) e2bHealth(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		// A probe of the listener, not of a sandbox: the front is up.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := f.e2bPass(w, r, id); err != nil {
		writeE2BErr(w, errdefs.Errorf(errNotRunning, "%w", err))
	}
}

// e2bEnvd passes a sandbox-side (Connect) call to the node of its
// E2b-Sandbox-Id.
func (f *Front) e2bEnvd(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		writeConnectErr(w, r, errdefs.Errorf(errdefs.ErrNotFound, "no such endpoint %s %s (a sandbox's calls carry E2b-Sandbox-Id)", r.Method, r.URL.Path))
		return
	}
	if err := f.e2bPass(w, r, id); err != nil {
		writeConnectErr(w, r, sandboxSide(id, err))
	}
}
