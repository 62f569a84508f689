package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// All sockets here are on 127.0.0.1: these tests never send traffic anywhere
// else.

// serveUDP starts s on a loopback UDP socket. stop cancels it and returns
// ServeUDP's error.
func serveUDP(t *testing.T, s *Server) (addr string, stop func() error) {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.ServeUDP(ctx, conn) }()
	return conn.LocalAddr().String(), func() error {
		cancel()
		return waitErr(t, done)
	}
}

// serveTCP starts s on a loopback TCP listener. stop cancels it and returns
// ServeTCP's error.
func serveTCP(t *testing.T, s *Server) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.ServeTCP(ctx, ln) }()
	var stopped bool
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return waitErr(t, done)
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within 5s of cancel")
		return nil
	}
}

// resolverFor returns a pure-Go resolver that sends every query to addr
// over network.
func resolverFor(network, addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

func TestServeResolver(t *testing.T) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			s, _, logs := newTestServer()
			serve := serveUDP
			if network == "tcp" {
				serve = serveTCP
			}
			addr, stop := serve(t, s)
			r := resolverFor(network, addr)

			// "ip" asks A and AAAA: the AAAA NODATA must not spoil the A.
			for _, family := range []string{"ip", "ip4"} {
				got, err := r.LookupNetIP(t.Context(), family, "api.allowed.test.")
				if err != nil {
					t.Fatalf("LookupNetIP(%s, allowed) error: %v", family, err)
				}
				if want := []netip.Addr{allowedAddr}; len(got) != 1 || got[0] != want[0] {
					t.Errorf("LookupNetIP(%s, allowed) = %v, want %v", family, got, want)
				}
			}
			if got, err := r.LookupNetIP(t.Context(), "ip", "secret.evil.test."); err == nil {
				t.Errorf("LookupNetIP(unlisted) = %v, want an error", got)
			}
			if err := stop(); err != nil {
				t.Errorf("Serve returned %v, want nil", err)
			}
			var sawAllow, sawDeny bool
			for _, e := range logs.all() {
				if e.Transport != network {
					t.Errorf("log Transport = %q, want %q", e.Transport, network)
				}
				sawAllow = sawAllow || (e.Allow && e.Name == "api.allowed.test" && e.Answer == allowedAddr)
				sawDeny = sawDeny || (!e.Allow && e.Name == "secret.evil.test")
			}
			if !sawAllow || !sawDeny {
				t.Errorf("log %+v lacks the allowed or the refused lookup", logs.all())
			}
		})
	}
}

// writeFrame sends msgs on c, each with its 2-byte length prefix, in one write.
func writeFrames(t *testing.T, c net.Conn, msgs ...[]byte) {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
		out = append(out, m...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
}

func readFrame(c net.Conn) (dnsmessage.Message, error) {
	var m dnsmessage.Message
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return m, err
	}
	var prefix [2]byte
	if _, err := io.ReadFull(c, prefix[:]); err != nil {
		return m, err
	}
	buf := make([]byte, binary.BigEndian.Uint16(prefix[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return m, err
	}
	return m, m.Unpack(buf)
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantClosed checks that the server closes c without answering.
func wantClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if m, err := readFrame(c); err == nil {
		t.Errorf("read answer %v, want the connection closed", m.Header)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("read error %v, want EOF or reset", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestServeTCPPipelined(t *testing.T) {
	s, _, _ := newTestServer()
	addr, _ := serveTCP(t, s)
	c := dialTCP(t, addr)

	writeFrames(t, c,
		query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 101}),
		query(t, "evil.test", dnsmessage.TypeA, queryOpts{id: 102}),
		query(t, "api.allowed.test", dnsmessage.TypeTXT, queryOpts{id: 103}))
	want := []struct {
		id    uint16
		rcode dnsmessage.RCode
	}{{101, dnsmessage.RCodeSuccess}, {102, dnsmessage.RCodeRefused}, {103, dnsmessage.RCodeRefused}}
	for _, w := range want {
		m, err := readFrame(c)
		if err != nil {
			t.Fatalf("reading answer to %d: %v", w.id, err)
		}
		if m.ID != w.id || m.RCode != w.rcode {
			t.Errorf("answer = ID %d %v, want ID %d %v", m.ID, m.RCode, w.id, w.rcode)
		}
	}
}

func TestServeTCPMalformedFrames(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte // written as is
	}{
		{"zero length", []byte{0, 0}},
		{"shorter than a header", []byte{0, 3, 1, 2, 3}},
		{"a response", append([]byte{0, 12}, 0, 1, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newTestServer()
			addr, _ := serveTCP(t, s)
			good := dialTCP(t, addr)
			bad := dialTCP(t, addr)

			if _, err := bad.Write(tt.frame); err != nil {
				t.Fatal(err)
			}
			wantClosed(t, bad)

			// The other connection is unaffected.
			writeFrames(t, good, query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 5}))
			if m, err := readFrame(good); err != nil || m.ID != 5 {
				t.Errorf("other connection: answer %v, %v; want ID 5", m.Header, err)
			}
		})
	}
}

func TestServeTCPMaxConns(t *testing.T) {
	s, _, _ := newTestServer()
	s.MaxTCPConns = 2
	addr, _ := serveTCP(t, s)

	ask := func(c net.Conn, id uint16) error {
		writeFrames(t, c, query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: id}))
		m, err := readFrame(c)
		if err == nil && m.ID != id {
			err = errors.New("wrong ID")
		}
		return err
	}
	first, second := dialTCP(t, addr), dialTCP(t, addr)
	// Answers prove both are accepted and counted before the third dials.
	for i, c := range []net.Conn{first, second} {
		if err := ask(c, uint16(i)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	third := dialTCP(t, addr)
	wantClosed(t, third)

	// Closing one frees its slot.
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dialTCP(t, addr)
		err := ask(c, 9)
		if err == nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed after closing a connection: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeTCPIdleTimeout(t *testing.T) {
	s, _, _ := newTestServer()
	s.IdleTimeout = 100 * time.Millisecond
	addr, _ := serveTCP(t, s)

	idle := dialTCP(t, addr)
	start := time.Now()
	wantClosed(t, idle)
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Errorf("idle connection closed after %v, want about 100ms", elapsed)
	}

	// A client trickling a message gets no more than one IdleTimeout for it.
	slow := dialTCP(t, addr)
	if _, err := slow.Write([]byte{0, 40, 0}); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, slow)
}

func TestServeStopsOnCancel(t *testing.T) {
	before := runtime.NumGoroutine()

	s, _, _ := newTestServer()
	udpAddr, stopUDP := serveUDP(t, s)
	tcpAddr, stopTCP := serveTCP(t, s)

	// Leave connections mid-message and idle, and traffic in flight.
	conns := []net.Conn{dialTCP(t, tcpAddr), dialTCP(t, tcpAddr)}
	if _, err := conns[0].Write([]byte{0, 200, 1, 2}); err != nil {
		t.Fatal(err)
	}
	writeFrames(t, conns[1], query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 1}))
	if _, err := readFrame(conns[1]); err != nil {
		t.Fatal(err)
	}
	u, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write(query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 2})); err != nil {
		t.Fatal(err)
	}

	if err := stopTCP(); err != nil {
		t.Errorf("ServeTCP = %v, want nil", err)
	}
	if err := stopUDP(); err != nil {
		t.Errorf("ServeUDP = %v, want nil", err)
	}
	for _, c := range conns {
		wantClosed(t, c)
		c.Close()
	}

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines remain, want %d:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeReturnsWhenClosed(t *testing.T) {
	s, _, _ := newTestServer()

	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udpDone := make(chan error, 1)
	go func() { udpDone <- s.ServeUDP(t.Context(), conn) }()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcpDone := make(chan error, 1)
	go func() { tcpDone <- s.ServeTCP(t.Context(), ln) }()
	// A connection still open when the listener closes must not keep
	// ServeTCP from returning.
	c := dialTCP(t, ln.Addr().String())
	writeFrames(t, c, query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 1}))
	if _, err := readFrame(c); err != nil {
		t.Fatal(err)
	}

	conn.Close()
	ln.Close()
	if err := waitErr(t, udpDone); err != nil {
		t.Errorf("ServeUDP = %v, want nil", err)
	}
	if err := waitErr(t, tcpDone); err != nil {
		t.Errorf("ServeTCP = %v, want nil", err)
	}
	wantClosed(t, c)
}
