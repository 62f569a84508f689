package httpx

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestStreamStalled: a caller that asks for a streamed answer and then
// reads none of it, its connection open, fails the stream's write with
// ErrStalled once one write has waited the stall time; a caller that
// reads the answer gets all of it.
func TestStreamStalled(t *testing.T) {
	const stall = 300 * time.Millisecond
	chunk := make([]byte, 64<<10)
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := NewStream(w, stall)
		n := 256 // 16 MiB: more than any socket buffer holds
		if r.URL.Path == "/short" {
			n = 4
		}
		for range n {
			if err := out.Send(chunk); err != nil {
				got <- err
				return
			}
		}
		out.End()
		got <- nil
	}))
	defer srv.Close()
	for _, tt := range []struct {
		path    string
		read    bool
		stalled bool
	}{
		{"/long", false, true},
		{"/short", true, false},
	} {
		t.Run(tt.path, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", tt.path)
			if tt.read {
				go func() {
					buf := make([]byte, 64<<10)
					for {
						if _, err := c.Read(buf); err != nil {
							return
						}
					}
				}()
			}
			select {
			case err := <-got:
				if stalled := errors.Is(err, ErrStalled); stalled != tt.stalled {
					t.Fatalf("the stream's end: %v; want stalled: %v", err, tt.stalled)
				}
				if tt.stalled && time.Since(start) > 20*stall+5*time.Second {
					t.Errorf("the stalled write took %v to fail", time.Since(start))
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stream's writer is still blocked after 30 s")
			}
		})
	}
}
