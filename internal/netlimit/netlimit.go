// Package netlimit bounds the connections a listener serves at once: the
// daemon's and the front's TCP listeners against callers that open
// connections without end (and, under pressure, each remote address to a
// share of them: Network), and the egress gateway's and the broker's
// listeners against code in a sandbox that does.
package netlimit

import (
	"net"
	"sync"
)

// Listener wraps ln so that every accepted connection holds a token from
// tokens until it is closed: at most cap(tokens) connections are served
// at once (listeners sharing tokens share the bound), and the rest wait in
// the listen backlog. Accept gives up when done is closed (nil: never).
func Listener(ln net.Listener, tokens chan struct{}, done <-chan struct{}) net.Listener {
	return &listener{Listener: ln, tokens: tokens, done: done}
}

// Conns is Listener with a bound of its own of n connections.
func Conns(ln net.Listener, n int) net.Listener {
	return Listener(ln, make(chan struct{}, n), nil)
}

type listener struct {
	net.Listener
	tokens chan struct{}
	done   <-chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case l.tokens <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.tokens
		return nil, err
	}
	return &conn{Conn: c, tokens: l.tokens}, nil
}

type conn struct {
	net.Conn
	tokens chan struct{}
	once   sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { <-c.tokens })
	return c.Conn.Close()
}
