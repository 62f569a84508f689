package front

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/cluster"
)

// TestRelayStalledCaller: a caller that stops reading a streamed answer
// relayed from a node, its connection open, holds neither the relay nor
// the node's answer past StallTimeout. Before, the relay's write blocked
// for as long as the caller kept the connection.
func TestRelayStalledCaller(t *testing.T) {
	defer func(d time.Duration) { StallTimeout = d }(StallTimeout)
	StallTimeout = 500 * time.Millisecond
	nodeDone := make(chan struct{})
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(nodeDone)
		chunk := bytes.Repeat([]byte("event\n"), 5000)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer node.Close()
	relayed := make(chan struct{})
	fr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(relayed)
		resp, err := http.Get(node.URL)
		if err != nil {
			t.Error(err)
			return
		}
		relay(w, resp, "node-a")
	}))
	defer fr.Close()
	conn, err := net.Dial("tcp", fr.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: front\r\n\r\n")
	// Nothing is read from conn from here on.
	for name, ch := range map[string]chan struct{}{"the relay": relayed, "the node's answer": nodeDone} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s is still held 10 s after its caller stopped reading", name)
		}
	}
}

// TestTerminalStalledCaller: a caller that stops reading its terminal
// joined through the front, its connection open, holds neither the join
// nor the node's connection past StallTimeout: both are closed. Before,
// the copy to the caller blocked for as long as the caller kept the
// connection, and the node's connection with it.
func TestTerminalStalledCaller(t *testing.T) {
	defer func(d time.Duration) { StallTimeout = d }(StallTimeout)
	StallTimeout = 500 * time.Millisecond
	nodeDone := make(chan struct{})
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(nodeDone)
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
		chunk := bytes.Repeat([]byte("output\n"), 5000)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer node.Close()
	f := New(nil, nil, slog.New(slog.DiscardHandler))
	fr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.upgrade(w, r, cluster.Node{Name: "node-a", Endpoint: node.URL})
	}))
	defer fr.Close()
	conn, err := net.Dial("tcp", fr.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/sessions/x/exec HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: airlock-tty\r\nContent-Length: 0\r\n\r\n")
	// Nothing is read from conn until the node's side has ended.
	select {
	case <-nodeDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the node's connection is still held 10 s after the caller stopped reading")
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the caller's connection was not closed: %v", err)
	}
}

// TestRelayBodyAfterAnswer: a caller's body whose end arrives after the
// node's answer has started (a stream's last chunk, as the E2B SDK sends
// it) still reaches the node, and the answer comes whole. Before, the
// front's first flush of the answer closed the caller's body under the
// request being forwarded, which cut the node's connection and the
// answer (the SDK: "missing EndStreamResponse").
func TestRelayBodyAfterAnswer(t *testing.T) {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, first); err != nil {
			t.Error(err)
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "got %s\n", first)
		w.(http.Flusher).Flush()
		rest, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "then %q %v\nend\n", rest, err)
	}))
	defer node.Close()
	f := New(nil, nil, slog.New(slog.DiscardHandler))
	fr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := f.forwardTo(r, node.URL, nil)
		if err != nil {
			t.Error(err)
			return
		}
		relay(w, resp, "node-a")
	}))
	defer fr.Close()
	conn, err := net.Dial("tcp", fr.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /stream HTTP/1.1\r\nHost: front\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "got hello\n" {
		t.Fatalf("the answer's start: %q %v", line, err)
	}
	// The answer has started; now the body's end.
	fmt.Fprintf(conn, "5\r\n tail\r\n0\r\n\r\n")
	rest, err := io.ReadAll(body)
	if want := "then \" tail\" <nil>\nend\n"; err != nil || string(rest) != want {
		t.Fatalf("the answer after the body's end: %q %v, want %q", rest, err, want)
	}
}

// TestUnreachable: a node's endpoint that takes connections is there;
// one whose listener is gone is not; an endpoint that cannot be parsed
// is not called gone on that ground.
func TestUnreachable(t *testing.T) {
	live := httptest.NewServer(http.NotFoundHandler())
	defer live.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for _, tt := range []struct {
		endpoint string
		want     bool
	}{
		{live.URL, false},
		{live.URL + "/", false},
		{deadURL, true},
		{"http://%zz", false},
	} {
		if got := unreachable(tt.endpoint); got != tt.want {
			t.Errorf("unreachable(%q) = %v, want %v", tt.endpoint, got, tt.want)
		}
	}
}
