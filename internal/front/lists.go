package front

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// The calls a front answers from every node at once: lists, each item
// marked with its "node", and a run's kill, which run ids do not route.

// fanOut sends r (a GET, or a DELETE without body) to every live node at
// once and returns their answers, in the nodes' order; a node that
// could not be reached has a nil answer.
func (f *Front) fanOut(r *http.Request) ([]cluster.Node, []*http.Response) {
	nodes := f.view.Nodes()
	resps := make([]*http.Response, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			resp, err := f.forwardTo(r, n.Endpoint, []byte{})
			if err != nil {
				f.logger.Warn("front: a node could not be asked", "node", n.Name, "path", r.URL.Path, "err", err)
				return
			}
			resps[i] = resp
		})
	}
	wg.Wait()
	return nodes, resps
}

// withNode is a node's JSON object with "node" added.
func withNode(obj json.RawMessage, node string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return obj
	}
	m["node"], _ = json.Marshal(node)
	b, _ := json.Marshal(m)
	return b
}

// readOK decodes a node's 200 answer into v; an error otherwise.
func readOK(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
		return fmt.Errorf("%d %s", resp.StatusCode, e.Message)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// mergedList answers a list call (sessions, pools, tools) with every
// node's items; unreached nodes are named in X-Airlock-Unreached.
func (f *Front) mergedList(w http.ResponseWriter, r *http.Request) {
	nodes, resps := f.fanOut(r)
	out := []json.RawMessage{}
	var unreached []string
	for i, resp := range resps {
		var items []json.RawMessage
		if resp == nil {
			unreached = append(unreached, nodes[i].Name)
			continue
		}
		if err := readOK(resp, &items); err != nil {
			writeErr(w, errdefs.Errorf(errNodeFailed, "node %s: %v", nodes[i].Name, err))
			return
		}
		for _, it := range items {
			out = append(out, withNode(it, nodes[i].Name))
		}
	}
	writeMerged(w, out, unreached)
}

// mergedPS answers GET /v1/ps: every node's runs and sessions.
func (f *Front) mergedPS(w http.ResponseWriter, r *http.Request) {
	nodes, resps := f.fanOut(r)
	out := struct {
		Runs      []json.RawMessage `json:"runs"`
		Sessions  []json.RawMessage `json:"sessions"`
		Unreached []string          `json:"unreached,omitempty"`
	}{Runs: []json.RawMessage{}, Sessions: []json.RawMessage{}}
	for i, resp := range resps {
		if resp == nil {
			out.Unreached = append(out.Unreached, nodes[i].Name)
			continue
		}
		var a struct {
			Runs     []json.RawMessage `json:"runs"`
			Sessions []json.RawMessage `json:"sessions"`
		}
		if err := readOK(resp, &a); err != nil {
			writeErr(w, errdefs.Errorf(errNodeFailed, "node %s: %v", nodes[i].Name, err))
			return
		}
		for _, it := range a.Runs {
			out.Runs = append(out.Runs, withNode(it, nodes[i].Name))
		}
		for _, it := range a.Sessions {
			out.Sessions = append(out.Sessions, withNode(it, nodes[i].Name))
		}
	}
	writeMerged(w, out, out.Unreached)
}

func writeMerged(w http.ResponseWriter, v any, unreached []string) {
	if len(unreached) > 0 {
		w.Header().Set("X-Airlock-Unreached", strings.Join(unreached, ","))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// killRun serves DELETE /v1/runs/{id}: a run's id does not name its
// node, so every node is asked; the one that has the run answers.
func (f *Front) killRun(w http.ResponseWriter, r *http.Request) {
	nodes, resps := f.fanOut(r)
	var found *http.Response
	node := ""
	for i, resp := range resps {
		if resp == nil {
			continue
		}
		if found == nil && resp.StatusCode != http.StatusNotFound {
			found, node = resp, nodes[i].Name
			continue
		}
		resp.Body.Close()
	}
	if found == nil {
		writeErr(w, errdefs.Errorf(errdefs.ErrNotFound, "no run %q in flight on any live node", r.PathValue("id")))
		return
	}
	relay(w, found, node)
}
