package netlimit

import (
	"net"
	"testing"
	"time"
)

// TestConns: past the bound, a connection waits in the backlog until one
// served is closed; a closed connection gives its token back once.
func TestConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Conns(ln, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was served with a bound of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // twice: one token back
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not served once one closed")
	}
	if n := len(l.(*listener).tokens); n != 2 {
		t.Fatalf("%d tokens held, want 2", n)
	}
}

// TestDone: Accept gives up when done is closed, waiting for a token.
func TestDone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tokens, done := make(chan struct{}, 1), make(chan struct{})
	tokens <- struct{}{} // spent
	l := Listener(ln, tokens, done)
	errc := make(chan error, 1)
	go func() { _, err := l.Accept(); errc <- err }()
	close(done)
	select {
	case err := <-errc:
		if err != net.ErrClosed {
			t.Fatalf("Accept: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not give up")
	}
}
