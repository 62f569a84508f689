package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// TestRunLowersItsLimits checks that a run may lower its tool's ceilings
// by name and that the lowered ceiling is what the kernel and the daemon
// hold it to (a command the tool's ceilings allow breaches the lowered
// one), and that a value above the tool's ceiling is refused naming the
// limit and the ceiling, with nothing run.
func TestRunLowersItsLimits(t *testing.T) {
	_, sock := serveConfig(t, `
tools:
  lim:
    limits: {memory: 256MiB, time: 60s, output: 1MiB, pids: 64}
`, nil)
	c := client.New(sock)
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		limits  api.RunLimits
		argv    string
		limit   string
		ceiling int64
	}{
		// 64 MB held in a shell variable: under the tool's 256 MiB.
		{"memory", api.RunLimits{Memory: "32MiB"}, `x=$(head -c 64000000 /dev/zero | tr '\0' a); echo ${#x}`, result.LimitMemory, 32 << 20},
		{"time", api.RunLimits{Time: "1s"}, "sleep 30", result.LimitTime, 1000},
		{"output", api.RunLimits{Output: "1KiB"}, "head -c 4096 /dev/zero", result.LimitOutput, 1024},
		{"pids", api.RunLimits{Pids: 8}, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait", result.LimitPids, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.limits
			r, err := c.Run(ctx, api.RunRequest{Tool: "lim", Argv: []string{"sh", "-c", tc.argv}, Limits: &lim})
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != result.LimitExceeded || r.Limit.Name != tc.limit || r.Limit.Ceiling != tc.ceiling {
				t.Fatalf("got %+v (limit %+v), want the %s limit at %d", r, r.Limit, tc.limit, tc.ceiling)
			}
		})
	}
	// The same commands without lowering stay under the tool's ceilings.
	r, err := c.Run(ctx, api.RunRequest{Tool: "lim", Argv: []string{"sh", "-c", `x=$(head -c 64000000 /dev/zero | tr '\0' a); echo ${#x}`}})
	if err != nil || r.Outcome != result.Exited || strings.TrimSpace(string(r.Stdout)) != "64000000" {
		t.Fatalf("under the tool's ceiling: %+v %v", r, err)
	}

	// Raising is refused by name, over the API's JSON as through the
	// client.
	for _, tc := range []struct {
		limits api.RunLimits
		status int
		want   string
	}{
		{api.RunLimits{Memory: "1GiB"}, 403, "limits.memory: 1GiB is over the tool's ceiling of 256MiB"},
		{api.RunLimits{Time: "2m"}, 403, "limits.time: 2m0s is over the tool's ceiling of 1m0s"},
		{api.RunLimits{Pids: 65}, 403, "limits.pids: 65 is over the tool's ceiling of 64"},
		{api.RunLimits{Output: "2MiB"}, 403, "limits.output: 2MiB is over the tool's ceiling of 1MiB"},
		{api.RunLimits{Time: "soon"}, 400, `limits.time: "soon": want a duration`},
		{api.RunLimits{Memory: "1KiB"}, 400, "below the minimum"},
	} {
		lim := tc.limits
		_, err := c.Run(ctx, api.RunRequest{Tool: "lim", Argv: []string{"true"}, Limits: &lim})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != tc.status || !strings.Contains(ce.Message, tc.want) {
			t.Errorf("%+v: got %v, want %d saying %q", tc.limits, err, tc.status, tc.want)
		}
	}
	hc, url := c.Endpoint("/v1/runs")
	resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(`{"tool":"lim","argv":["true"],"limits":{"memory":"512MiB"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(e.Message, "limits.memory: 512MiB is over the tool's ceiling of 256MiB") {
		t.Fatalf("raw JSON: %d %+v", resp.StatusCode, e)
	}
	// The environment as an object, end to end.
	resp, err = hc.Post(url, "application/json", bytes.NewReader([]byte(`{"tool":"lim","argv":["sh","-c","echo $A$B"],"env":{"B":"2","A":"1"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	var res result.Result
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(res.Stdout) != "12\n" {
		t.Fatalf("env as an object: %d %+v", resp.StatusCode, res)
	}
	pools, err := c.Pools(ctx)
	if err != nil || pools[0].Hits+pools[0].Misses != 6 {
		t.Fatalf("a refused run claimed a sandbox: %+v %v", pools, err)
	}
}
