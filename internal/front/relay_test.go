package front

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
