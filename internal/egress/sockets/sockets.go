// Package sockets opens the egress gateway's fixed listeners inside a
// sandbox's network namespace, and names them to the sandbox's commands
// (Env). It makes them with plain system calls and links nothing of the
// gateway itself (no HTTP, no DNS), so that a program which only holds
// them until something arrives (airlock run, see internal/lazygw) stays
// small.
package sockets

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"golang.org/x/sys/unix"
)

// Fixed addresses inside every sandbox. They sit below port 1024 or on
// addresses of their own, and are bound before any command runs, so code in
// the sandbox (which holds no capability over the namespace) can neither
// take them first nor collide with its own 127.0.0.1 servers.
const (
	// ProxyAddr is the HTTP proxy that HTTP_PROXY and HTTPS_PROXY name.
	ProxyAddr = "127.0.0.2:3128"
	// ResolverAddr is the DNS resolver; the sandbox's /etc/resolv.conf
	// names its address.
	ResolverAddr = "127.0.0.53:53"
)

// The same addresses as the kernel takes them.
var (
	proxyIP    = [4]byte{127, 0, 0, 2}
	proxyPort  = 3128
	resolverIP = [4]byte{127, 0, 0, 53}
	dnsPort    = 53
)

// backlog is the listen backlog of the TCP listeners (the kernel caps it
// at net.core.somaxconn).
const backlog = 4096

// Set is the gateway's listeners, open in one namespace: the proxy's TCP
// listener and the resolver's UDP socket and TCP listener. The files are
// close-on-exec, and left out of Go's poller: whoever serves them takes
// them over (net.FileListener), and may be another process.
type Set struct {
	Proxy, DNSUDP, DNSTCP *os.File
}

// Open opens the set inside the network namespace ns.
func Open(ns *os.File) (*Set, error) {
	s := &Set{}
	err := netns.Do(ns, func() error {
		var err error
		if s.Proxy, err = open(unix.SOCK_STREAM, proxyIP, proxyPort, "proxy"); err != nil {
			return err
		}
		if s.DNSUDP, err = open(unix.SOCK_DGRAM, resolverIP, dnsPort, "resolver-udp"); err != nil {
			return err
		}
		s.DNSTCP, err = open(unix.SOCK_STREAM, resolverIP, dnsPort, "resolver-tcp")
		return err
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("egress: open listeners in the sandbox: %w", err)
	}
	return s, nil
}

// open makes one IPv4 socket bound to ip:port, listening when it is a
// stream socket.
func open(typ int, ip [4]byte, port int, name string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	err = func() error {
		if typ == unix.SOCK_STREAM {
			// As Go's own listeners: a gateway that closes and a new
			// one (a session's next binding) may bind again at once.
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
				return fmt.Errorf("setsockopt: %w", err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ip, Port: port}); err != nil {
			return fmt.Errorf("bind %d.%d.%d.%d:%d: %w", ip[0], ip[1], ip[2], ip[3], port, err)
		}
		if typ == unix.SOCK_STREAM {
			if err := unix.Listen(fd, backlog); err != nil {
				return fmt.Errorf("listen: %w", err)
			}
		}
		return nil
	}()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Close closes what is open of the set.
func (s *Set) Close() error {
	var errs []error
	for _, f := range []*os.File{s.Proxy, s.DNSUDP, s.DNSTCP} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// Env is what the proxy's presence adds to a command's environment.
func Env() []string {
	const url = "http://" + ProxyAddr
	const noProxy = "localhost,127.0.0.0/8,::1"
	return []string{
		"HTTP_PROXY=" + url, "http_proxy=" + url,
		"HTTPS_PROXY=" + url, "https_proxy=" + url,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}
