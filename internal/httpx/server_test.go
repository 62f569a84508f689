package httpx

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBound attacks a server's bodies: one declared and never sent, one
// that stops half-way, one that comes slowly but steadily, a request
// without a body whose answer takes longer than BodyStall, and a
// connection switched to another protocol that stays quiet longer than
// it. Before, a refused request's body was waited for without end.
func TestBound(t *testing.T) {
	defer func(d, g time.Duration) { BodyStall, DrainGrace = d, g }(BodyStall, DrainGrace)
	BodyStall = 300 * time.Millisecond
	DrainGrace = 2 * BodyStall
	mux := http.NewServeMux()
	mux.HandleFunc("POST /refuse", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no token", http.StatusUnauthorized)
	})
	mux.HandleFunc("POST /read", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			if r.Context().Err() != nil {
				return // taken for a caller gone
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "read %d", len(b))
	})
	// A body read whole, then an answer slower than BodyStall: the
	// server's own read of the connection (which tells a caller gone)
	// must not inherit the stall bound armed for the body's last read.
	mux.HandleFunc("POST /readslow", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(3 * BodyStall):
			fmt.Fprint(w, "done")
		case <-r.Context().Done():
			http.Error(w, "taken for a caller gone", http.StatusInternalServerError)
		}
	})
	// A full-duplex answer (a relay): the answer starts, then the body
	// is read as it comes; one that stops must not leave the connection
	// kept for a next request that is the body's rest.
	mux.HandleFunc("POST /duplex", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "early")
		_ = rc.Flush()
		_, _ = io.ReadAll(r.Body)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * BodyStall):
			fmt.Fprint(w, "done")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /switch", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		brw.Flush()
		line, err := brw.ReadString('\n')
		fmt.Fprintf(c, "echo %q %v\n", line, err)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(mux, Options{})
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()

	for _, tt := range []struct {
		name string
		send []string // sent one after another, BodyStall/2 apart
		want string   // the answer's status line and body, then whether the connection was closed
	}{
		{"a refused body never sent", []string{"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"}, "401 no token\n closed"},
		// A small body the handler did not read is read by the server
		// (within DrainGrace), and the connection kept.
		{"a refused body sent whole", []string{"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"}, "401 no token\n open"},
		// A caller still sending as the refusal comes finishes within
		// DrainGrace and reads its answer (a connection closed under
		// its send would show it a reset instead).
		{"a refused body still coming", []string{"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n", "body"}, "401 no token\n open"},
		// Over what the server reads to keep a connection: it closes,
		// after the answer.
		{"a refused large body", []string{"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("x", 300<<10)}, "401 no token\n closed"},
		{"a body that stops", []string{"POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf"}, "408 the request's body stopped coming (nothing for 300ms)\n closed"},
		{"a malformed body", []string{"POST /read HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, "400 invalid byte in chunk length\n closed"},
		{"a body that comes slowly", []string{"POST /read HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "2\r\nab\r\n", "2\r\ncd\r\n", "2\r\nef\r\n", "2\r\ngh\r\n", "0\r\n\r\n"}, "200 read 8 open"},
		{"a full-duplex answer whose body stops", []string{"POST /duplex HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf"}, "200 early closed"},
		{"no body, a slow answer", []string{"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"}, "200 done open"},
		{"a body read whole, a slow answer", []string{"POST /readslow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"}, "200 done open"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			for i, s := range tt.send {
				if i > 0 {
					time.Sleep(BodyStall / 2)
				}
				io.WriteString(c, s)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Closed: the server's end comes well before the deadline.
			c.SetReadDeadline(time.Now().Add(DrainGrace + 3*BodyStall))
			state := "open"
			if _, err := br.ReadByte(); err == io.EOF {
				state = "closed"
			}
			if got := fmt.Sprintf("%d %s %s", resp.StatusCode, b, state); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("a switched connection", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// The body is declared and never sent: the switch is made
		// before it is read.
		io.WriteString(c, "POST /switch HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\nContent-Length: 10\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%v %v", resp, err)
		}
		time.Sleep(3 * BodyStall)
		io.WriteString(c, "typed\n")
		line, err := br.ReadString('\n')
		if want := "echo \"typed\\n\" <nil>\n"; line != want || err != nil {
			t.Fatalf("got %q %v, want %q", line, err, want)
		}
	})
}

// TestCut: a body cut from another goroutine ends a read blocked in it at
// once, and one that starts after the cut, whatever the stall bound: the
// read's own deadline never overwrites the cut's. Before, a cut that came
// between a read's start and its arming of the stall bound was lost, and
// the read waited the whole bound.
func TestCut(t *testing.T) {
	defer func(d time.Duration) { BodyStall = d }(BodyStall)
	BodyStall = time.Minute
	for _, when := range []string{"during a read", "before a read"} {
		t.Run(when, func(t *testing.T) {
			got := make(chan error, 1)
			h := func(w http.ResponseWriter, r *http.Request) {
				if when == "before a read" {
					if !Cut(r.Body) {
						t.Error("Cut did not know the server's body")
					}
				} else {
					time.AfterFunc(100*time.Millisecond, func() { Cut(r.Body) })
				}
				_, err := io.ReadAll(r.Body)
				got <- err
			}
			srv := New(http.HandlerFunc(h), Options{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
			select {
			case err := <-got:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("the read ended with %v, want a timeout", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the cut body's read did not end")
			}
		})
	}
	if Cut(strings.NewReader("x")) {
		t.Error("Cut took another reader for a server's body")
	}
}
