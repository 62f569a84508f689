package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"golang.org/x/sys/unix"
)

// ErrPortClosed is DialPort's answer when nothing in the sandbox listens
// on the port (the connection was refused).
var ErrPortClosed = errors.New("nothing in the sandbox listens on the port")

// dialPortTimeout bounds DialPort's connect: inside one namespace on
// loopback, a connect that does not answer at once is a listener whose
// backlog is full.
const dialPortTimeout = 5 * time.Second

// DialPort connects to a TCP port of the sandbox's own loopback
// (127.0.0.1:port inside its network namespace), as a process of the
// sandbox would: what its servers listen on there, or on all addresses,
// and nothing else — not the host's ports, nor another sandbox's, nor the
// egress gateway's (which listens on other loopback addresses). The
// socket is the host's (the daemon's), made in the sandbox's namespace;
// it stays usable when the call returns, until either end closes it, or
// the sandbox is destroyed.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("sandbox %s: port %d: want 1 to 65535", s.id, port)
	}
	s.mu.Lock()
	if s.killed || s.netns == nil {
		s.mu.Unlock()
		return nil, ErrDead
	}
	s.execs.Add(1)
	ns := s.netns
	s.mu.Unlock()
	defer s.execs.Done()
	var c net.Conn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: dialPortTimeout}
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("sandbox %s: port %d: %w", s.id, port, ErrPortClosed)
		}
		return nil, fmt.Errorf("sandbox %s: port %d: %w", s.id, port, err)
	}
	return c, nil
}
