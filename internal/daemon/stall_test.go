package daemon

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestStalledReaderDoesNotHoldTheCommand: a caller that asks for a
// command's events and then stops reading them, its connection open,
// holds neither the command nor its sandbox: once a write has waited the
// stall timeout, the command ends, recorded with the reason. Before, the
// output pump blocked in the write kept the run (and its sandbox, and its
// share of the node's capacity) for as long as the connection stayed
// open, its time limit notwithstanding. A run, a session's exec (which
// ends the session, as a caller going away does) and a terminal, each
// producing output as fast as it can.
func TestStalledReaderDoesNotHoldTheCommand(t *testing.T) {
	_, sock := serveConfig(t, "tools:\n  sh: {limits: {time: 60s}}\n", func(o *Options) { o.StallTimeout = time.Second })
	c := client.New(sock)
	s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, body, header string
	}{
		{"run", "/v1/runs", `{"tool":"sh","argv":["yes"]}`, "Accept: " + api.NDJSON + "\r\n"},
		{"exec", "/v1/sessions/" + s.ID + "/exec", `{"argv":["yes"]}`, "Accept: " + api.NDJSON + "\r\n"},
		{"terminal", "/v1/runs", `{"tool":"sh","argv":["yes"],"tty":{"rows":24,"cols":80}}`, "Connection: Upgrade\r\nUpgrade: " + api.TTYUpgrade + "\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			since := time.Now()
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", tt.path, len(tt.body), tt.header, tt.body); err != nil {
				t.Fatal(err)
			}
			// Nothing is read from conn from here on. The command is
			// seen in flight, then gone well before its 60 s limit.
			seen := false
			for {
				a, err := c.PS(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				running := len(a.Runs) > 0
				if tt.name == "exec" {
					running = len(a.Sessions) > 0 && a.Sessions[0].Running > 0
				}
				if running {
					seen = true
				} else if seen {
					break
				}
				if time.Since(since) > 20*time.Second {
					t.Fatalf("a command whose caller stopped reading is still in flight after %v (seen: %v): %+v", time.Since(since).Round(time.Second), seen, a)
				}
				time.Sleep(50 * time.Millisecond)
			}
			page, err := c.Audit(t.Context(), client.AuditQuery{Kind: "run.finished", Since: since.Add(-time.Second).Format(time.RFC3339Nano)})
			if err != nil {
				t.Fatal(err)
			}
			var detail string
			for _, ev := range page.Events {
				detail += string(ev.Detail)
			}
			if !strings.Contains(detail, "stopped reading") {
				t.Errorf("the command's record does not say why it ended: %s", detail)
			}
		})
	}
	// As when its caller goes away, the session ends with its exec.
	if got, err := c.Session(t.Context(), s.ID); err != nil || got.State != "ended" {
		t.Fatalf("the session after its exec's caller stalled: %+v %v", got, err)
	}
}
