package mcpserver

// ResultSchema is the JSON Schema of the result object (result.Result),
// the structured content of every tool result.
var ResultSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"sandbox_id": map[string]any{"type": "string"},
		"run_id":     map[string]any{"type": "string", "description": "the run's id in the daemon's audit log"},
		"outcome":    map[string]any{"type": "string", "enum": []string{"exited", "signaled", "limit", "error"}, "description": "exited: the command ended on its own; signaled: killed by a signal; limit: a ceiling was breached and the sandbox destroyed; error: airlock failed"},
		"exit_code":  map[string]any{"type": "integer"},
		"signal":     map[string]any{"type": "integer"},
		"limit": map[string]any{
			"type": []string{"object", "null"},
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
		"evidence": map[string]any{"type": []string{"array", "null"}},
		"egress":   map[string]any{"type": []string{"array", "null"}},
		"broker":   map[string]any{"type": []string{"array", "null"}},
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
