package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// screen is a terminal's output that can wait for what it shows.
type screen struct {
	mu     sync.Mutex
	b      bytes.Buffer
	onShow func(string) // called under mu with all shown so far
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.onShow != nil {
		s.onShow(s.b.String())
	}
	return len(p), nil
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTTYThroughTheAPI runs commands on a terminal through the daemon,
// with the Go client: a run of a tool and an exec of a session, typed
// input, a window change, and the session still usable after.
func TestTTYThroughTheAPI(t *testing.T) {
	_, c, _ := start(t)
	ctx := t.Context()

	var out screen
	r, err := c.RunTTY(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", `tty; stty size; read -r line; echo "got:$line"; exit 3`}},
		client.TTY{Size: api.TTYSize{Rows: 30, Cols: 100}, Stdin: strings.NewReader("typed\n"), Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.Exited || r.ExitCode != 3 {
		t.Fatalf("run: %s %d %q; terminal showed %q", r.Outcome, r.ExitCode, r.Error, out.String())
	}
	for _, want := range []string{"/dev/pts/0\r\n", "30 100\r\n", "got:typed\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run's terminal showed %q, want %q", out.String(), want)
		}
	}

	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, s.ID)
	resize := make(chan api.TTYSize, 1)
	var shown screen
	shown.onShow = func(all string) {
		if strings.Contains(all, "ready") && len(resize) == 0 && !strings.Contains(all, "50 132") {
			select {
			case resize <- api.TTYSize{Rows: 50, Cols: 132}:
			default:
			}
		}
	}
	stdin, typing := io.Pipe()
	defer typing.Close()
	r, err = c.ExecTTY(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", `trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done`}},
		client.TTY{Size: api.TTYSize{Rows: 24, Cols: 80}, Stdin: stdin, Output: &shown, Resize: resize})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != result.Exited || r.ExitCode != 0 || !strings.Contains(shown.String(), "50 132\r\n") {
		t.Fatalf("exec: %s %d %q; terminal showed %q, want the new size", r.Outcome, r.ExitCode, r.Error, shown.String())
	}
	r, err = c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"echo", "after"}})
	if err != nil || string(r.Stdout) != "after\n" {
		t.Fatalf("an exec after the terminal's: %+v %v", r, err)
	}
}

// rawTTY sends body to path asking for the terminal's protocol, and
// returns the connection and what answered.
func rawTTY(t *testing.T, sock, path, body string, upgrade bool) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hdr := ""
	if upgrade {
		hdr = "Connection: Upgrade\r\nUpgrade: " + api.TTYUpgrade + "\r\n"
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", path, len(body), hdr, body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

// TestTTYRefusals attacks the terminal's protocol: a request for a
// terminal that does not ask to switch, or carries its input in the body,
// is refused before anything runs; a line past the bound, or a client
// that goes away, ends the command, and the sandbox with it.
func TestTTYRefusals(t *testing.T) {
	_, c, sock := start(t)
	for _, tt := range []struct {
		name, body string
		upgrade    bool
	}{
		{"no upgrade asked", `{"tool":"sh","argv":["true"],"tty":{"rows":24,"cols":80}}`, false},
		{"input in the body", `{"tool":"sh","argv":["true"],"stdin":"x","tty":{"rows":24,"cols":80}}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, resp := rawTTY(t, sock, "/v1/runs", tt.body, tt.upgrade)
			var e api.Error
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusBadRequest || e.Code != api.CodeInvalid {
				t.Fatalf("answered %d %+v, want 400 invalid", resp.StatusCode, e)
			}
		})
	}

	t.Run("a line past the bound", func(t *testing.T) {
		conn, br, resp := rawTTY(t, sock, "/v1/runs", `{"tool":"sh","argv":["sleep","60"],"tty":{"rows":24,"cols":80}}`, true)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("answered %s, want a switch", resp.Status)
		}
		began := time.Now()
		go func() { _, _ = conn.Write(bytes.Repeat([]byte("x"), api.MaxTTYInput+1)) }()
		var res *result.Result
		sc := bufio.NewScanner(br)
		for sc.Scan() {
			var ev result.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("event %q: %v", sc.Bytes(), err)
			}
			if ev.Result != nil {
				res = ev.Result
				break
			}
		}
		if res == nil || res.Outcome != result.Error || !strings.Contains(res.Error, "a line over 64 KiB") || time.Since(began) > 20*time.Second {
			t.Fatalf("result %+v after %v, want the command ended for the line", res, time.Since(began))
		}
		waitNoRuns(t, c)
	})

	t.Run("the client goes away", func(t *testing.T) {
		conn, _, resp := rawTTY(t, sock, "/v1/runs", `{"tool":"sh","argv":["sleep","60"],"tty":{"rows":24,"cols":80}}`, true)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("answered %s, want a switch", resp.Status)
		}
		if ps, err := c.PS(t.Context()); err != nil || len(ps.Runs) != 1 {
			t.Fatalf("runs in flight: %+v %v, want the one", ps, err)
		}
		conn.Close()
		waitNoRuns(t, c)
	})
}

// waitNoRuns waits until the daemon has no run in flight.
func waitNoRuns(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, err := c.PS(t.Context())
		if err == nil && len(ps.Runs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still in flight: %+v %v", ps, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
