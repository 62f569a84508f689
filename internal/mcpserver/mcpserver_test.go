package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
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
			if sc, ok := got.StructuredContent.(Structured); !ok || sc.Result != &tt.r {
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

// TestCallRecordedOnce: every call is recorded exactly once, by OnCall
// or, when the RunFunc takes the record over, by the RunFunc.
func TestCallRecordedOnce(t *testing.T) {
	c, err := config.Parse("a.yaml", []byte(`
tools:
  t:
    command: [x, "{a}"]
    inputs:
      a: {required: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	ran := &result.Result{Outcome: result.Exited, SandboxID: "sb1"}
	tests := []struct {
		name    string
		args    string
		takes   bool  // the RunFunc calls Record
		runErr  error // the RunFunc fails
		byRun   bool  // want the record from the RunFunc
		outcome string
	}{
		{"ran, recorded by OnCall", `{"a":"v"}`, false, nil, false, "exited"},
		{"ran, taken over", `{"a":"v"}`, true, nil, true, "exited"},
		{"refused arguments", `{}`, true, nil, false, "invalid"},
		{"could not run", `{"a":"v"}`, false, errors.New("no sandbox"), false, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var onCall, byRun []CallRecord
			h := handler(Options{
				Run: func(_ context.Context, j Job) (*result.Result, error) {
					if tt.runErr != nil {
						return nil, tt.runErr
					}
					if tt.takes {
						byRun = append(byRun, j.Record(ran))
					}
					return ran, nil
				},
				OnCall: func(r CallRecord) { onCall = append(onCall, r) },
			}, c.Tools["t"])
			_, _ = h(t.Context(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "t", Arguments: json.RawMessage(tt.args)}})
			got := onCall
			if tt.byRun {
				got = byRun
				if len(onCall) != 0 {
					t.Errorf("OnCall told of a call the RunFunc recorded: %+v", onCall)
				}
			}
			if len(got) != 1 || len(onCall)+len(byRun) != 1 {
				t.Fatalf("records: OnCall %+v, RunFunc %+v; want one", onCall, byRun)
			}
			r := got[0]
			if r.Tool != "t" || r.Outcome != tt.outcome {
				t.Errorf("record %+v, want tool t, outcome %s", r, tt.outcome)
			}
			if tt.outcome == "exited" && (r.Sandbox != "sb1" || r.Arguments["a"] != "v") {
				t.Errorf("record %+v lacks the sandbox or the arguments", r)
			}
		})
	}
}
