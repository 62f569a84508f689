package netlimit

import (
	"context"
	"net"
	"os"
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

// TestNetworkShare: under pressure, one remote address gets its share of
// the bound and no more (its next connections are closed at once), and
// another address is still served; under none, one address may use the
// whole bound. Before, one address could hold every slot.
func TestNetworkShare(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Network(ln, 8) // pressure past 6 open, a share of 2
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed tells whether the listener closed c at once.
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return !os.IsTimeout(err)
	}
	var held []net.Conn
	for range 6 {
		dial("127.0.0.2")
		held = append(held, <-accepted)
	}
	for _, tt := range []struct {
		from       string
		wantServed bool
	}{
		{"127.0.0.2", false}, // over its share, under pressure
		{"127.0.0.3", true},
		{"127.0.0.3", true},
	} {
		c := dial(tt.from)
		if got := !closed(c); got != tt.wantServed {
			t.Fatalf("a connection from %s: served %v, want %v", tt.from, got, tt.wantServed)
		}
		if tt.wantServed {
			held = append(held, <-accepted)
		}
	}
	if got := Refused(l); got != 1 {
		t.Errorf("Refused = %d, want 1", got)
	}
	// The pressure gone, 127.0.0.2 is served again.
	for _, c := range held[:4] {
		c.Close()
	}
	if c := dial("127.0.0.2"); closed(c) {
		t.Fatal("a connection from 127.0.0.2 was closed with the bound under pressure")
	}
	<-accepted
}

// TestVouch: an address over its share, under pressure, is shed until a
// request on one of its connections shows a credential (a cluster's
// front, a load balancer); then it is served, and another address is
// still held to its share.
func TestVouch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Network(ln, 16) // pressure past 12 open, a share of 4
	defer l.Close()
	accepted := make(chan net.Conn, 32)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	served := func(from string) (net.Conn, bool) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		select {
		case s := <-accepted:
			return s, true
		case <-time.After(500 * time.Millisecond):
			return nil, false
		}
	}
	for i := range 4 {
		if _, ok := served("127.0.0.3"); !ok {
			t.Fatalf("connection %d from 127.0.0.3 not served below the pressure", i)
		}
	}
	var first net.Conn
	for i := range 8 {
		c, ok := served("127.0.0.2")
		if !ok {
			t.Fatalf("connection %d from 127.0.0.2 not served below the pressure", i)
		}
		if i == 0 {
			first = c
		}
	}
	if _, ok := served("127.0.0.2"); ok {
		t.Fatal("127.0.0.2 served over its share before it showed a credential")
	}
	Vouch(context.Background()) // no connection: nothing
	Vouch(WithConn(context.Background(), first))
	if _, ok := served("127.0.0.2"); !ok {
		t.Fatal("127.0.0.2 shed after it showed a credential")
	}
	if _, ok := served("127.0.0.3"); ok {
		t.Fatal("127.0.0.3 served over its share: another address's credential vouched for it")
	}
}
