package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/e2b"
)

// TestStalledReaderDoesNotHoldTheCommand: a caller that asks for a
// command's events and then stops reading them, its connection open,
// holds neither the command nor its sandbox: once a write has waited the
// stall timeout, the command ends, recorded with the reason. Before, the
// output pump blocked in the write kept the run (and its sandbox, and its
// share of the node's capacity) for as long as the connection stayed
// open, its time limit notwithstanding. A run, a session's exec (whose
// session goes on) and a terminal, each producing output as fast as it
// can.
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
	// The session outlives its exec's stalled caller.
	if r, err := c.Exec(t.Context(), s.ID, api.ExecRequest{Argv: []string{"echo", "still here"}}); err != nil || string(r.Stdout) != "still here\n" {
		t.Fatalf("the session after its exec's caller stalled: %+v %v", r, err)
	}
}

// TestSessionOutlivesItsCaller: a caller that goes away in the middle of
// an exec, a plain one or one on a terminal, ends the command (and its
// process group), not the session: the next exec finds what the session
// had, and the record says why the command ended.
func TestSessionOutlivesItsCaller(t *testing.T) {
	_, sock := serveConfig(t, "tools:\n  sh: {}\n", nil)
	c := client.New(sock)
	s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/state"}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, body, header string }{
		{"plain", `{"argv":["sh","-c","touch /workspace/plain; exec sleep 60"]}`, ""},
		{"events", `{"argv":["sh","-c","touch /workspace/events; exec sleep 60"]}`, "Accept: " + api.NDJSON + "\r\n"},
		{"terminal", `{"argv":["sh","-c","touch /workspace/terminal; exec sleep 60"],"tty":{"rows":24,"cols":80}}`, "Connection: Upgrade\r\nUpgrade: " + api.TTYUpgrade + "\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			since := time.Now()
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST /v1/sessions/%s/exec HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", s.ID, len(tt.body), tt.header, tt.body)
			// Running counts the exec from its start record on; the
			// command runs once it has made its mark.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := c.GetFile(t.Context(), s.ID, tt.name); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the exec never ran")
				}
			}
			conn.Close()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				got, err := c.Session(t.Context(), s.ID)
				if err != nil || got.State != "active" {
					t.Fatalf("the session after its caller went away: %+v %v", got, err)
				}
				if got.Running == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command outlived its caller by 10 s")
				}
			}
			r, err := c.Exec(t.Context(), s.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/state"}})
			if err != nil || string(r.Stdout) != "kept\n" {
				t.Fatalf("the next exec: %+v %v", r, err)
			}
			page, err := c.Audit(t.Context(), client.AuditQuery{Kind: "run.finished", Session: s.ID, Since: since.Add(-time.Second).Format(time.RFC3339Nano)})
			if err != nil {
				t.Fatal(err)
			}
			var detail string
			for _, ev := range page.Events {
				detail += string(ev.Detail)
			}
			if !strings.Contains(detail, "the command was killed, the session goes on") {
				t.Errorf("the killed command's record: %s", detail)
			}
		})
	}
}

// TestE2BStalledStreamIsDropped: a process's output goes to every stream
// attached to it; one whose client stops reading, connection open, is
// dropped after the stall timeout, so the process and the other streams
// go on. Before, its blocked write held the process's output for all.
func TestE2BStalledStreamIsDropped(t *testing.T) {
	base := serveE2BWith(t, "", func(o *Options) { o.StallTimeout = time.Second })
	sb := e2bCreate(t, base)
	stream := func(method, body string) []byte {
		msg := e2b.AppendEnvelope(nil, 0, []byte(body))
		return []byte(fmt.Sprintf("POST /process.Process/%s HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\nContent-Length: %d\r\n\r\n%s",
			method, strings.TrimPrefix(base, "http://"), sb.SandboxID, sb.EnvdAccessToken, len(msg), msg))
	}
	// The stalled client starts a process with plenty of output, tagged,
	// and reads nothing.
	addr := strings.TrimPrefix(base, "http://")
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := stalled.Write(stream("Start", `{"process":{"cmd":"sh","args":["-c","yes | head -c 8000000; echo finished"]}}`)); err != nil {
		t.Fatal(err)
	}
	// Another client finds it and reads it to the end.
	pid := func() uint32 {
		req, _ := http.NewRequest("POST", base+"/process.Process/List", strings.NewReader(`{}`))
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l struct{ Processes []e2b.ProcessInfo }
		_ = json.NewDecoder(resp.Body).Decode(&l)
		for _, p := range l.Processes {
			if p.Config.Cmd == "sh" {
				return p.PID
			}
		}
		return 0
	}
	var reader net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p := pid()
		if p == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the stalled client's process is not listed")
			}
			continue
		}
		if reader, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		if _, err := reader.Write(stream("Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, p))); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(reader)
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(r.Body)
			t.Fatalf("connect: %s %s", r.Status, b)
		}
		_, first, err := e2b.ReadEnvelope(r.Body, e2b.MaxMessage)
		if err == nil && !strings.Contains(string(first), `"error"`) {
			defer reader.Close()
			var total int
			ended := false
			reader.SetReadDeadline(time.Now().Add(60 * time.Second))
			for !ended {
				flags, msg, err := e2b.ReadEnvelope(r.Body, e2b.MaxMessage)
				if err != nil {
					t.Fatalf("the reading stream broke after %d bytes of messages: %v", total, err)
				}
				total += len(msg)
				ended = flags&e2b.FlagEndStream != 0 || strings.Contains(string(msg), `"end"`)
			}
			if total < 1<<20 {
				t.Fatalf("the reading stream saw %d bytes before the end", total)
			}
			return
		}
		reader.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no process to connect to: %s %v", first, err)
		}
	}
}

// TestMCPStalledProgressDoesNotHoldTheCall: a tool call that asks for
// progress, from a client that then reads nothing, connection open, does
// not hold the run: notifications that cannot go out are dropped, and the
// run ends by its own limits. Before, the output pump blocked in the
// notification's write, past the run's time limit.
func TestMCPStalledProgressDoesNotHoldTheCall(t *testing.T) {
	_, sock := serveConfig(t, "tools:\n  loud:\n    command: [sh, -c, \"yes\"]\n    limits: {time: 3s}\n", nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequest("POST", "http://airlock/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	init := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stall","version":"1"}}}`)
	session := init.Header.Get("Mcp-Session-Id")
	if init.StatusCode != 200 || session == "" {
		t.Fatalf("initialize: %s, session %q", init.Status, session)
	}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"loud","arguments":{},"_meta":{"progressToken":"p"}}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", session, len(body), body)
	// Nothing is read from conn from here on. The call is seen in
	// flight and then gone, or (when it ends on its output limit before
	// a look finds it) its end is in the audit log.
	c := client.New(sock)
	began, seen := time.Now(), false
	for {
		a, err := c.PS(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Runs) > 0 {
			seen = true
		} else if seen {
			break
		} else if page, err := c.Audit(t.Context(), client.AuditQuery{Kind: "run.finished", Tool: "loud", Since: began.Add(-time.Second).Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		} else if len(page.Events) > 0 {
			break
		}
		if time.Since(began) > 20*time.Second {
			t.Fatalf("a tool call whose client stopped reading its progress is still in flight after %v (seen: %v), with a 3 s limit", time.Since(began).Round(time.Second), seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEveryStartHasAnEnd: callers that go away at any moment of a run or
// a session's exec (before it is recorded, while its start is written,
// while it starts, while it runs) leave, for every run.started in the
// log, its run.finished. Before, a caller gone while the start was being
// written left a start with no end.
func TestEveryStartHasAnEnd(t *testing.T) {
	d, sock := serveConfig(t, "tools:\n  sh: {}\n", nil)
	c := client.New(sock)
	s, err := c.CreateSession(t.Context(), api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second).Format(time.RFC3339Nano)
	for i := range 60 {
		path, body := "/v1/runs", `{"tool":"sh","argv":["sleep","5"]}`
		if i%2 == 1 {
			path, body = "/v1/sessions/"+s.ID+"/exec", `{"argv":["sleep","5"]}`
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
		time.Sleep(time.Duration(i%15) * time.Millisecond)
		conn.Close()
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a, err := c.PS(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Session(t.Context(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Runs) == 0 && got.Running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commands whose callers went away are still in flight: %+v, session %+v", a, got)
		}
	}
	// The ends are recorded as the runs end, and written in the
	// background: all of them are in the log once it is flushed (a
	// loaded host's writer may lag the last end by a moment). A run
	// whose caller left during its claim is in neither list above until
	// it has its sandbox, so the log is read until every start has its
	// end, or the deadline says one never will.
	runs := func(kind string) map[string]bool {
		page, err := c.Audit(t.Context(), client.AuditQuery{Kind: kind, Since: since, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, ev := range page.Events {
			m[ev.Run] = true
		}
		return m
	}
	var started, finished map[string]bool
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := d.Audit().Append(t.Context()); err != nil {
			t.Fatal(err)
		}
		started, finished = runs("run.started"), runs("run.finished")
		open := 0
		for id := range started {
			if !finished[id] {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
	}
	for id := range started {
		if !finished[id] {
			t.Errorf("run %s started and never finished in the log", id)
		}
	}
	t.Logf("%d runs recorded of 60 requests", len(started))
}
