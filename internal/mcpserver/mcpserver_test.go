package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/result"
)

func TestToolResult(t *testing.T) {
	tests := []struct {
		name    string
		r       result.Result
		isError bool
		text    string
	}{
		{"clean exit", result.Result{Outcome: result.Exited, Stdout: result.Output("out\n")}, false, "out\n"},
		{"stdout and stderr", result.Result{Outcome: result.Exited, Stdout: result.Output("a"), Stderr: result.Output("b\n")}, false, "a\nstderr:\nb\n"},
		{"only stderr", result.Result{Outcome: result.Exited, Stderr: result.Output("warn")}, false, "stderr:\nwarn\n"},
		{"failed command", result.Result{Outcome: result.Exited, ExitCode: 2, Stderr: result.Output("no such file\n")}, true, "exit code 2\nstderr:\nno such file\n"},
		{"signal", result.Result{Outcome: result.Signaled, Signal: 9}, true, "killed by signal 9\n"},
		{"breach", result.Result{Outcome: result.LimitExceeded, Limit: &result.Limit{Name: "memory", Ceiling: 100, Observed: 100, Unit: result.UnitBytes}, Stdout: result.Output("partial")},
			true, "limit exceeded: memory (ceiling 100 bytes, observed 100); the sandbox was destroyed\nstdout:\npartial\n"},
		{"truncated", result.Result{Outcome: result.Exited, Stdout: result.Output("x"), Truncated: true}, false, "x\n(output truncated at the output ceiling)\n"},
		{"binary", result.Result{Outcome: result.Exited, Stdout: result.Output("\xff\xfe")}, false, "\uFFFD\n(not valid UTF-8; the exact bytes are in the structured result)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ToolResult(&tt.r)
			if got.IsError != tt.isError {
				t.Errorf("isError %v, want %v", got.IsError, tt.isError)
			}
			if text := got.Content[0].(*mcp.TextContent).Text; text != tt.text {
				t.Errorf("text %q, want %q", text, tt.text)
			}
			if got.StructuredContent != &tt.r {
				t.Error("structured content is not the result")
			}
		})
	}
}

func TestInputSchema(t *testing.T) {
	c, err := config.Parse("a.yaml", []byte(`
tools:
  t:
    command: [x, "{a}", "{b}", "{c}"]
    inputs:
      a: {required: true, description: first, enum: [p, q]}
      b: {type: integer, minimum: 1, maximum: 9, default: "3"}
      c: {type: boolean}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(InputSchema(c.Tools["t"]))
	for _, want := range []string{
		`"type":"object"`, `"additionalProperties":false`, `"required":["a"]`,
		`"a":{"description":"first","enum":["p","q"],"maxLength":16384,"type":"string"}`,
		`"b":{"default":3,"maximum":9,"minimum":1,"type":"integer"}`,
		`"c":{"type":"boolean"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("schema %s lacks %s", b, want)
		}
	}
	// The result object must satisfy its schema's required fields.
	rb, _ := json.Marshal(&result.Result{Outcome: result.Exited})
	var obj map[string]any
	json.Unmarshal(rb, &obj)
	for _, f := range ResultSchema["required"].([]string) {
		if _, ok := obj[f]; !ok {
			t.Errorf("the result object has no %q, which its schema requires", f)
		}
	}
}
