package mcpserver

import (
	"encoding/json"

	"github.com/airlockhq/airlock/result"
)

// ResultSchema is the JSON Schema of the result object (result.Result),
// the structured content of every tool result (as Structured writes it).
// Every property has one type: a member that may be absent is left out of
// required, and Structured leaves out the members that are null, since a
// type list such as [object, null] is not portable across MCP clients
// (the MCP Inspector warns of each).
var ResultSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"sandbox_id": map[string]any{"type": "string"},
		"run_id":     map[string]any{"type": "string", "description": "the run's id in the daemon's audit log"},
		"outcome":    map[string]any{"type": "string", "enum": []string{"exited", "signaled", "limit", "error"}, "description": "exited: the command ended on its own; signaled: killed by a signal; limit: a ceiling was breached and the sandbox destroyed; error: airlock failed"},
		"exit_code":  map[string]any{"type": "integer"},
		"signal":     map[string]any{"type": "integer"},
		"limit": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name":     map[string]any{"type": "string", "enum": []string{"memory", "pids", "disk", "fds", "output", "time", "cpu"}},
				"ceiling":  map[string]any{"type": "integer"},
				"observed": map[string]any{"type": "integer"},
				"unit":     map[string]any{"type": "string"},
			},
		},
		"error":     map[string]any{"type": "string"},
		"stdout":    output,
		"stderr":    output,
		"truncated": map[string]any{"type": "boolean"},
		"usage": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"wall_ms": integer, "cpu_ms": integer, "memory_peak_bytes": integer, "pids_peak": integer, "disk_peak_bytes": integer,
			},
		},
		"evidence": map[string]any{"type": "array"},
		"egress":   map[string]any{"type": "array"},
		"broker":   map[string]any{"type": "array"},
	},
	"required": []string{"sandbox_id", "outcome", "exit_code", "signal", "stdout", "stderr", "truncated", "usage"},
}

var integer = map[string]any{"type": "integer"}

// output is captured output: a string when it is valid UTF-8, else
// {"base64": "..."}.
var output = map[string]any{
	"anyOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "object", "properties": map[string]any{"base64": map[string]any{"type": "string"}}, "required": []string{"base64"}},
	},
}

// Structured is a result as the structured content of a tool result: its
// JSON without the members that are null (no limit unless one was
// breached, say), which ResultSchema does not type as null.
type Structured struct{ *result.Result }

// structured is a result with its nullable members left out when empty:
// these fields shadow the embedded result's of the same JSON names, so
// the result is encoded once, its output written straight from its
// buffers (a tool call's answer holds no copy of it).
type structured struct {
	*result.Result
	Limit    *result.Limit        `json:"limit,omitempty"`
	Evidence []result.Sample      `json:"evidence,omitempty"`
	Egress   []result.EgressEvent `json:"egress,omitempty"`
	Broker   []result.BrokerEvent `json:"broker,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (s Structured) MarshalJSON() ([]byte, error) {
	if s.Result == nil {
		return []byte("null"), nil
	}
	return json.Marshal(structured{Result: s.Result, Limit: s.Limit, Evidence: s.Evidence, Egress: s.Egress, Broker: s.Broker})
}
