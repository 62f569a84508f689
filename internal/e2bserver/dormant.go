package e2bserver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	"github.com/airlockhq/airlock/internal/node"
)

// E2B sandboxes across a restart of airlock: a paused session whose files
// the node kept comes back dormant (node's dormant.go), and so does its
// E2B side, from what register kept in the session (its metadata and
// environment). Its access tokens are new: connect hands them out, as it
// does for every sandbox.

// edgeState is what the E2B side keeps of a sandbox in its session.
type edgeState struct {
	Metadata map[string]string `json:"metadata,omitempty"`
	EnvVars  map[string]string `json:"envVars,omitempty"`
}

func edgeStateOf(metadata, envVars map[string]string) json.RawMessage {
	b, _ := json.Marshal(edgeState{Metadata: metadata, EnvVars: envVars})
	return b
}

// Adopt registers the node's dormant sessions (brought back paused from a
// restart) as E2B sandboxes; the daemon calls it once, before serving.
// A session an edge other than this one opened has no E2B state, and is
// not one of its sandboxes.
func (d *Server) Adopt() int {
	n := 0
	for _, s := range d.SessionsOf(node.Local) {
		raw := s.EdgeState()
		if !s.Dormant() || len(raw) == 0 {
			continue
		}
		var st edgeState
		if json.Unmarshal(raw, &st) != nil {
			continue
		}
		var env []string
		for k, v := range st.EnvVars {
			env = append(env, k+"="+v)
		}
		var tok, traffic [24]byte
		rand.Read(tok[:])
		rand.Read(traffic[:])
		sb := &e2bSandbox{s: s, token: hex.EncodeToString(tok[:]), traffic: hex.EncodeToString(traffic[:]), metadata: st.Metadata, envVars: st.EnvVars, env: env,
			limits: d.Plan(s.Tool().Name).Spec.Limits, procs: map[uint32]*e2bProc{}}
		d.e2b.mu.Lock()
		if d.e2b.m == nil {
			d.e2b.m = map[string]*e2bSandbox{}
		}
		d.e2b.m[s.ID()] = sb
		d.e2b.mu.Unlock()
		n++
	}
	return n
}
