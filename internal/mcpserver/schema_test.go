package mcpserver

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/result"
)

// typeLists returns the paths in schema whose "type" is not a single
// type name, such as [array, null], which MCP clients do not all take.
func typeLists(path string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if _, ok := x.(string); k == "type" && !ok {
				out = append(out, fmt.Sprintf("%s.type = %v", path, x))
				continue
			}
			out = append(out, typeLists(path+"."+k, x)...)
		}
	case []any:
		for i, x := range v {
			out = append(out, typeLists(fmt.Sprintf("%s[%d]", path, i), x)...)
		}
	}
	return out
}

// TestSchemasPortable: the output schema and the input schemas have one
// type per property, and the structured content of every kind of result
// matches the output schema's types (no null where it says object).
func TestSchemasPortable(t *testing.T) {
	c, err := config.Parse("a.yaml", []byte(`
tools:
  t:
    command: [sh, -c, "{script}", "{n}", "{flag}"]
    inputs:
      script: {type: string, required: true}
      n: {type: integer, minimum: 1}
      flag: {type: boolean, default: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]map[string]any{"output": ResultSchema, "input of t": InputSchema(c.Tools["t"])}
	for name, s := range schemas {
		if l := typeLists(name, s); len(l) > 0 {
			t.Errorf("type lists: %v", l)
		}
	}
	props := ResultSchema["properties"].(map[string]any)
	results := []result.Result{
		{Outcome: result.Exited},
		{Outcome: result.LimitExceeded, Limit: &result.Limit{Name: "memory", Ceiling: 1, Observed: 1, Unit: "bytes"}, Evidence: []result.Sample{{}}},
		{Outcome: result.Error, Error: "x", Egress: []result.EgressEvent{}},
	}
	for _, r := range results {
		b, err := json.Marshal(Structured{&r})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			p, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s: %q is not in the schema", b, k)
				continue
			}
			want, _ := p["type"].(string)
			var got string
			switch v.(type) {
			case nil:
				got = "null"
			case map[string]any:
				got = "object"
			case []any:
				got = "array"
			case string:
				got = "string"
			case bool:
				got = "boolean"
			case float64:
				got = "integer"
			}
			if want != "" && got != want {
				t.Errorf("%s: %q is %s, the schema says %s", b, k, got, want)
			}
		}
		for _, k := range ResultSchema["required"].([]string) {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: required %q missing", b, k)
			}
		}
	}
}
