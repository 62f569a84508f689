package broker

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/broker/brokerspec"
	"github.com/airlockhq/airlock/result"
)

// operation is a declared operation with its own rate limiter.
type operation struct {
	cfg     *brokerspec.Operation
	limiter *limiter
}

// newOperation prepares an operation of service, its limiter taken from
// rates (shared with other brokers) or, without, its own.
func newOperation(service string, cfg *brokerspec.Operation, rates *Rates) *operation {
	o := &operation{cfg: cfg}
	if rates != nil {
		o.limiter = rates.limiter(service, o.name(), cfg.Rate)
	} else {
		o.limiter = newLimiter(cfg.Rate)
	}
	return o
}

// Rates holds operations' rate limiters for the brokers of many
// sandboxes, so that an operation's rate bounds the calls of all of them
// together: an agent that opens more sandboxes gets no more calls made
// with the credential. Give the brokers of one tool one Rates (a tool's
// services may set their own rates). It is safe for concurrent use.
type Rates struct {
	mu sync.Mutex // guards m
	m  map[rateKey]*limiter
}

type rateKey struct {
	service, op string
	perMinute   int
}

// NewRates returns an empty Rates.
func NewRates() *Rates { return &Rates{m: map[rateKey]*limiter{}} }

// limiter returns the shared limiter of an operation, made on first use.
func (r *Rates) limiter(service, op string, perMinute int) *limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := rateKey{service, op, perMinute}
	l, ok := r.m[k]
	if !ok {
		l = newLimiter(perMinute)
		r.m[k] = l
	}
	return l
}

// name is the operation as configured, for events and refusals.
// baseHeaders go upstream on every call; others only when the operation
// declares them (brokerspec.Operation.Headers).
var baseHeaders = []string{"Accept", "Accept-Language", "Content-Type", "User-Agent"}

// forwards reports whether request header k may go upstream.
func (o *operation) forwards(k string) bool {
	k = http.CanonicalHeaderKey(k)
	return slices.Contains(baseHeaders, k) || slices.Contains(o.cfg.Headers, k)
}

func (o *operation) name() string { return o.cfg.Template.Method + " " + o.cfg.Template.Path }

// match returns the first operation of s matching method and segs.
func (s *service) match(method string, segs []string) *operation {
	for _, o := range s.ops {
		if _, ok := o.cfg.Template.Match(method, segs); ok {
			return o
		}
	}
	return nil
}

// checkQuery allows only the query parameters the operation lists, and
// returns the query re-encoded canonically: what goes upstream is what was
// checked, not the caller's spelling of it.
func (o *operation) checkQuery(raw string) (string, string) {
	if raw == "" {
		return "", ""
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return "", "malformed query string"
	}
	for k := range vals {
		if !slices.Contains(o.cfg.Query, k) {
			allowed := "none"
			if len(o.cfg.Query) > 0 {
				allowed = fmt.Sprint(o.cfg.Query)
			}
			return "", fmt.Sprintf("query parameter %s is not allowed for %s (allowed: %s)", strconv.Quote(shorten(k)), o.name(), allowed)
		}
	}
	return vals.Encode(), ""
}

// checkBody enforces the request's content type and declared size: it
// returns the refusal's status, code and reason, or an empty reason.
func (o *operation) checkBody(r *http.Request) (int, string, string) {
	if r.ContentLength > o.cfg.MaxRequest {
		return http.StatusRequestEntityTooLarge, result.BrokerTooLarge, fmt.Sprintf("request body of %d bytes is over the cap of %d", r.ContentLength, o.cfg.MaxRequest)
	}
	if r.ContentLength <= 0 { // none, or chunked: checked once read
		return 0, "", ""
	}
	status, reason := o.checkBodyType(r.Header.Get("Content-Type"))
	return status, result.BrokerContentType, reason
}

// checkBodyType allows only the media types the operation lists.
func (o *operation) checkBodyType(contentType string) (int, string) {
	mt := mediaType(contentType)
	if len(o.cfg.ContentTypes) > 0 && !slices.Contains(o.cfg.ContentTypes, mt) {
		return http.StatusUnsupportedMediaType, fmt.Sprintf("content type %s is not allowed for %s (allowed: %v)", strconv.Quote(shorten(contentType)), o.name(), o.cfg.ContentTypes)
	}
	return 0, ""
}

// limiter is a token bucket of perMinute calls, refilled continuously.
type limiter struct {
	max  float64
	rate float64 // tokens per second

	mu     sync.Mutex // guards tokens and last
	tokens float64
	last   time.Time
}

func newLimiter(perMinute int) *limiter {
	if perMinute <= 0 {
		perMinute = 60
	}
	return &limiter{tokens: float64(perMinute), max: float64(perMinute), rate: float64(perMinute) / 60}
}

func (l *limiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.max, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
