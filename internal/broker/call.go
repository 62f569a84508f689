package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/broker/redact"
	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/internal/refusal"
	"github.com/airlockhq/airlock/result"
)

// overrideHeaders let a client claim one method while sending another;
// some frameworks honour them, so a GET-only operation could become a
// DELETE upstream. A call carrying any of them is refused.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Method"}

// hopHeaders are connection-level and never forwarded either way.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// credentialLike reports whether a caller-sent header could carry a
// credential or session. Such headers are removed before the call goes
// upstream: the only credential that leaves is the broker's own, so code
// in the sandbox cannot ride the broker with a token it got elsewhere.
func credentialLike(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"auth", "token", "cookie", "secret", "api-key", "apikey", "api_key", "session", "signature", "credential", "password"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// call is one call in flight: the event it becomes, and how to answer.
type call struct {
	b  *Broker
	w  http.ResponseWriter
	ev result.BrokerEvent
}

// refuse answers the sandbox with the broker's own status and a one-line
// body that names the service and the reason, and records the decision
// with its code (result.Broker*).
func (c *call) refuse(status int, code, reason string) {
	c.ev.Allow = false
	c.ev.Status = status
	c.ev.Code, c.ev.Reason = code, reason
	h := c.w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	c.w.WriteHeader(status)
	svc := ""
	if c.ev.Service != "" {
		svc = fmt.Sprintf(" (service %q)", c.ev.Service)
	}
	fmt.Fprintf(c.w, "airlock broker%s: %s; %s\n", svc, reason, refusal.BrokerRule(code))
}

func (b *Broker) serve(w http.ResponseWriter, r *http.Request) {
	c := &call{b: b, w: w, ev: result.BrokerEvent{Time: time.Now(), Method: r.Method}}
	if !b.enter() {
		c.refuse(http.StatusServiceUnavailable, result.BrokerClosing, "the sandbox's broker is closing")
		return
	}
	defer b.wg.Done()
	defer func() {
		c.ev.DurationMs = time.Since(c.ev.Time).Milliseconds()
		b.emit(c.ev)
	}()
	b.handle(c, r)
}

func (b *Broker) handle(c *call, r *http.Request) {
	// The request target exactly as sent: Go's URL parsing decodes and
	// would hide the encodings the normaliser must see.
	raw := r.RequestURI
	rawPath, rawQuery, _ := strings.Cut(raw, "?")
	c.ev.Path = shorten(rawPath)
	if !strings.HasPrefix(raw, "/") {
		c.refuse(http.StatusBadRequest, result.BrokerBadPath, "call $AIRLOCK_BROKER_URL/<service>/<path>; absolute and authority forms are refused")
		return
	}
	for _, h := range overrideHeaders {
		if _, ok := r.Header[h]; ok {
			c.refuse(http.StatusBadRequest, result.BrokerOverride, fmt.Sprintf("method override header %s is refused", h))
			return
		}
	}
	segs, err := route.Normalize(rawPath)
	if err != nil {
		c.refuse(http.StatusBadRequest, result.BrokerBadPath, err.Error())
		return
	}
	if len(segs) == 0 {
		c.refuse(http.StatusNotFound, result.BrokerNoService, fmt.Sprintf("name a service: $AIRLOCK_BROKER_URL/<service>/<path> (services: %s)", b.list()))
		return
	}
	c.ev.Service = segs[0]
	c.ev.Path = route.Join(segs[1:])
	s := b.services[segs[0]]
	if s == nil {
		c.ev.Service = ""
		c.refuse(http.StatusForbidden, result.BrokerNoService, fmt.Sprintf("no service %s for this tool (services: %s)", strconv.Quote(shorten(segs[0])), b.list()))
		c.ev.Service = shorten(segs[0])
		return
	}
	c.serveOperation(s, r, segs[1:], rawQuery)
}

// serveOperation serves a call for service s whose path, below the
// service, is segs: the operation menu, the query and body checks, the
// rate, then upstream. Both entries take it: the broker's own endpoint
// and a transparently brokered name (transparent.go).
func (c *call) serveOperation(s *service, r *http.Request, segs []string, rawQuery string) {
	op := s.match(r.Method, segs)
	if op == nil {
		c.refuse(http.StatusForbidden, result.BrokerNoOperation, fmt.Sprintf("no operation matches %s %s", r.Method, c.ev.Path))
		return
	}
	c.ev.Operation = op.name()
	query, reason := op.checkQuery(rawQuery)
	if reason != "" {
		c.refuse(http.StatusForbidden, result.BrokerQuery, reason)
		return
	}
	if status, code, reason := op.checkBody(r); reason != "" {
		c.refuse(status, code, reason)
		return
	}
	if !op.limiter.allow(time.Now()) {
		c.refuse(http.StatusTooManyRequests, result.BrokerRate, fmt.Sprintf("over the rate of %d calls per minute for %s", op.cfg.Rate, op.name()))
		return
	}
	c.forward(s, op, r, segs, query)
}

// list names the services of this broker for refusals.
func (b *Broker) list() string {
	if len(b.names) == 0 {
		return "none"
	}
	return strings.Join(b.names, ", ")
}

// shorten bounds what of a caller's input goes into events and answers.
func shorten(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// minSecret is the shortest secret the broker attaches: below it,
// redaction cannot tell the secret from innocent data (real API tokens
// are 20 bytes and more).
const minSecret = 8

// forward sends a matched call upstream with the real credential and
// relays the answer, redacted.
func (c *call) forward(s *service, op *operation, r *http.Request, segs []string, query string) {
	secret, err := s.secret.Read()
	if err != nil {
		// The error names the secret and its source, never its value.
		c.b.cfg.Logger.Warn("broker: secret unavailable", "service", s.cfg.Name, "err", err)
		c.refuse(http.StatusBadGateway, result.BrokerNoSecret, "the service's credential is not available on the host")
		return
	}
	if len(secret) < minSecret {
		// Redaction would have to mask a few bytes wherever innocent
		// data holds them, and would still miss the secret in forms too
		// short to tell apart: such a credential is not used.
		c.b.cfg.Logger.Warn("broker: secret too short to keep out of answers", "service", s.cfg.Name, "bytes", len(secret), "minimum", minSecret)
		c.refuse(http.StatusBadGateway, result.BrokerShortSecret, fmt.Sprintf("the service's credential is shorter than %d bytes, too short to keep out of the answers; the operator must use a longer one", minSecret))
		return
	}
	value := s.cfg.Credential.Value(secret)
	red := redact.New(secret, value)

	target := *s.cfg.Upstream
	target.RawQuery = query
	base := strings.TrimSuffix(s.cfg.Upstream.EscapedPath(), "/")
	escaped := base + route.Join(segs)
	if len(segs) == 0 && base == "" {
		escaped = "/"
	}
	unescaped, err := url.PathUnescape(escaped)
	if err != nil {
		c.refuse(http.StatusBadRequest, result.BrokerBadPath, "path cannot be sent upstream")
		return
	}
	target.Path, target.RawPath = unescaped, escaped

	// The body is read whole (it is capped) before anything goes
	// upstream, so an oversized body is refused without the upstream
	// ever seeing part of it.
	body, err := io.ReadAll(io.LimitReader(r.Body, op.cfg.MaxRequest+1))
	switch {
	case int64(len(body)) > op.cfg.MaxRequest:
		c.refuse(http.StatusRequestEntityTooLarge, result.BrokerTooLarge, fmt.Sprintf("request body over the cap of %d bytes", op.cfg.MaxRequest))
		return
	case err != nil:
		c.refuse(http.StatusBadRequest, result.BrokerBadRequest, "request body could not be read")
		return
	case len(body) > 0 && r.ContentLength < 0:
		// A chunked body gets the same content-type check as a sized one.
		if status, reason := op.checkBodyType(r.Header.Get("Content-Type")); reason != "" {
			c.refuse(status, result.BrokerContentType, reason)
			return
		}
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		c.refuse(http.StatusBadRequest, result.BrokerBadRequest, "call cannot be sent upstream")
		return
	}
	out.URL = &target
	if len(body) == 0 {
		out.Body = http.NoBody
	}
	// Only the headers an API call needs go upstream: a short list, and
	// what the operation declares. Anything else could steer a framework
	// upstream (X-Original-URL, X-Rewrite-URL and X-Original-Host route
	// to paths no operation allows) or slice the answer past redaction
	// (Range, If-Range: twelve bytes at a time, each slice too short to
	// hold the secret).
	if len(r.Header.Values("Content-Type")) > 1 {
		c.refuse(http.StatusBadRequest, result.BrokerContentType, "more than one Content-Type")
		return
	}
	for k, vs := range r.Header {
		if !op.forwards(k) || credentialLike(k) || isHop(k) || strings.EqualFold(k, s.cfg.Credential.Header) || forwardedHeader(k) {
			continue
		}
		out.Header[k] = vs
	}
	// What the sandbox's opener set (checked by CheckSet when it was
	// given): only where the operation forwards the header anyway, so
	// it is never more than the sandbox could send itself.
	for k, v := range s.cfg.Set {
		if op.forwards(k) {
			out.Header.Set(k, v)
		}
	}
	// Compressed answers could hide the secret from redaction.
	out.Header.Set("Accept-Encoding", "identity")
	out.Header.Set(s.cfg.Credential.Header, value)

	c.ev.Allow = true
	resp, err := s.transport.RoundTrip(out)
	c.ev.BytesOut = int64(len(body))
	if err != nil {
		var denied *deniedError
		switch {
		case errors.As(err, &denied):
			c.refuse(http.StatusBadGateway, result.BrokerAddress, "upstream refused by address checks: "+denied.reason)
		default:
			c.refuse(http.StatusBadGateway, result.BrokerUpstream, "upstream unreachable")
		}
		return
	}
	defer resp.Body.Close()
	c.ev.Upstream = true
	// Every instance of the header counts: an empty Content-Encoding
	// followed by "gzip" passed a check of the first alone, and a client
	// that decodes showed the secret.
	if ce := encoded(resp.Header.Values("Content-Encoding")); ce != "" {
		c.refuse(http.StatusBadGateway, result.BrokerEncoding, fmt.Sprintf("upstream answered with %s encoding, which cannot be checked for the secret", shorten(ce)))
		return
	}
	if te := encoded(resp.TransferEncoding); te != "" && !strings.EqualFold(te, "chunked") || len(resp.TransferEncoding) > 1 {
		c.refuse(http.StatusBadGateway, result.BrokerEncoding, fmt.Sprintf("upstream answered with transfer coding %s, which cannot be checked for the secret", shorten(strings.Join(resp.TransferEncoding, ", "))))
		return
	}
	if resp.StatusCode == http.StatusPartialContent && !op.forwards("Range") {
		c.refuse(http.StatusBadGateway, result.BrokerPartial, "upstream answered with part of a resource (206) to a call without a Range")
		return
	}
	if resp.ContentLength > op.cfg.MaxResponse {
		c.refuse(http.StatusBadGateway, result.BrokerResponseTooLarge, fmt.Sprintf("upstream response of %d bytes is over the cap of %d", resp.ContentLength, op.cfg.MaxResponse))
		return
	}
	c.relay(resp, red, op.cfg.MaxResponse)
}

// relay copies the upstream's answer to the sandbox with the secret
// redacted from headers and body. A redirect is relayed like any answer:
// the broker never follows one, so the credential never travels to the
// place it points at.
func (c *call) relay(resp *http.Response, red *redact.Redactor, max int64) {
	h := c.w.Header()
	for k, vs := range resp.Header {
		// Length changes with redaction; cookies are sessions bound to
		// the broker's credential and stay outside.
		if isHop(k) || strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Set-Cookie") || strings.EqualFold(k, "Set-Cookie2") {
			continue
		}
		for _, v := range vs {
			h.Add(red.String(k), red.String(v))
		}
	}
	c.ev.Status = resp.StatusCode
	c.w.WriteHeader(resp.StatusCode)
	rw := red.Writer(c.w)
	n, err := io.Copy(rw, io.LimitReader(resp.Body, max+1))
	if n > max {
		c.ev.Code, c.ev.Reason = result.BrokerResponseTooLarge, fmt.Sprintf("response cut at the cap of %d bytes", max)
		c.ev.BytesIn = max
		// End the connection without a proper end of body, so the
		// client sees a truncated answer, not a complete-looking one.
		panic(http.ErrAbortHandler)
	}
	if ferr := rw.Close(); err == nil {
		err = ferr
	}
	c.ev.BytesIn = n
	if err != nil {
		c.ev.Code, c.ev.Reason = result.BrokerUpstream, "response relay ended early"
	}
}

// encoded returns the first coding other than identity among header
// values (each a comma-separated list), or "".
func encoded(values []string) string {
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// forwardedHeader reports headers that describe the client's connection
// or claim identities (Host is the upstream's, set by the transport).
func forwardedHeader(k string) bool {
	k = strings.ToLower(k)
	return k == "host" || k == "forwarded" || strings.HasPrefix(k, "x-forwarded-") || k == "x-real-ip" || k == "accept-encoding" || k == "expect"
}

// mediaType is the lower-case type/subtype of a Content-Type header.
func mediaType(v string) string {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}
