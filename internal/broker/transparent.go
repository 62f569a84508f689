package broker

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/result"
)

// Transparent brokering (issue 39; docs/decisions/0035): a client in the
// sandbox calls a service at its real host name, unchanged; the egress
// gateway terminates that TLS with the sandbox's own authority
// (sandboxca) and hands each request here, where it meets the same
// operation menu, credential, upstream and redaction as a call to the
// broker's endpoint.

// Transparent is the handler of the requests a client sent to name, a
// service's upstream host, over a connection the gateway terminated; nil
// when no service of this broker has that host. A request must name the
// same host (Host, or HTTP/2's :authority) and carry an origin-form
// target; its path is the upstream's, base path included.
func (b *Broker) Transparent(name string) http.Handler {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	var s *service
	for _, n := range b.names {
		if sv := b.services[n]; strings.EqualFold(sv.cfg.Upstream.Hostname(), name) && sv.cfg.Upstream.Scheme == "https" {
			s = sv
			break
		}
	}
	if s == nil {
		return nil
	}
	port := s.cfg.Upstream.Port()
	if port == "" {
		port = "443"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{b: b, w: w, ev: result.BrokerEvent{Time: time.Now(), Method: r.Method, Service: s.cfg.Name}}
		if !b.enter() {
			c.refuse(http.StatusServiceUnavailable, result.BrokerClosing, "the sandbox's broker is closing")
			return
		}
		defer b.wg.Done()
		defer func() {
			c.ev.DurationMs = time.Since(c.ev.Time).Milliseconds()
			b.emit(c.ev)
		}()
		b.handleTransparent(c, r, s, name, port)
	})
}

func (b *Broker) handleTransparent(c *call, r *http.Request, s *service, name, port string) {
	raw := r.RequestURI
	rawPath, rawQuery, _ := strings.Cut(raw, "?")
	c.ev.Path = shorten(rawPath)
	if !strings.HasPrefix(raw, "/") {
		c.refuse(http.StatusBadRequest, result.BrokerBadPath, "absolute and authority forms are refused: send the path alone")
		return
	}
	// The host the request names must be the one its connection was
	// terminated for: another would be a second service's, or a site
	// the credential was never meant for.
	host, hport, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, hport = r.Host, port
	}
	if !strings.EqualFold(strings.TrimSuffix(host, "."), name) || hport != port {
		c.refuse(http.StatusMisdirectedRequest, result.BrokerMisdirected, fmt.Sprintf("the request names host %s on a connection for %s", strconv.Quote(shorten(r.Host)), name))
		return
	}
	for _, h := range overrideHeaders {
		if _, ok := r.Header[h]; ok {
			c.refuse(http.StatusBadRequest, result.BrokerOverride, fmt.Sprintf("method override header %s is refused", h))
			return
		}
	}
	if r.Header.Get("Upgrade") != "" {
		c.refuse(http.StatusForbidden, result.BrokerNoOperation, "a protocol upgrade (websocket) to a brokered host is refused")
		return
	}
	segs, err := route.Normalize(rawPath)
	if err != nil {
		c.refuse(http.StatusBadRequest, result.BrokerBadPath, err.Error())
		return
	}
	// The upstream's base path is part of what the client sends.
	base, _ := route.Normalize(s.cfg.Upstream.EscapedPath())
	if len(segs) < len(base) || route.Join(segs[:len(base)]) != route.Join(base) {
		c.refuse(http.StatusForbidden, result.BrokerNoOperation, fmt.Sprintf("no operation matches %s %s (the service is under %s)", r.Method, c.ev.Path, route.Join(base)))
		return
	}
	segs = segs[len(base):]
	c.ev.Path = route.Join(segs)
	c.serveOperation(s, r, segs, rawQuery)
}
