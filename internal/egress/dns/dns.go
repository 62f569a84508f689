// Package dns is the resolver airlock serves inside each sandbox's network
// namespace, the one the sandbox's /etc/resolv.conf points at.
//
// It never recurses and never forwards anything upstream: a lookup is itself
// an egress channel (a name like <secret>.attacker.example reaches the
// attacker's authoritative server through any forwarding resolver), so the
// only names that get an answer are those the owner allows, and the answer is
// a loopback "transparent" address airlock also listens on. Everything else
// gets REFUSED. Only class IN A and AAAA questions are ever served; the types
// classically used to tunnel data (TXT, NULL, ANY, ...) are refused before the
// owner is even asked.
package dns

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockhq/airlock/result"
)

// Defaults for the zero values of Server's fields.
const (
	defaultRate        = 100
	defaultBurst       = 200
	defaultMaxTCPConns = 16
	defaultIdleTimeout = 10 * time.Second
	defaultTTL         = 5
)

const (
	// maxNameLen is the longest name, in presentation form without the
	// trailing dot, that RFC 1035 allows (255 wire bytes).
	maxNameLen = 253
	// maxLabelLen is the longest label RFC 1035 allows.
	maxLabelLen = 63
	// maxLogName bounds Query.Name so a hostile name cannot bloat the log.
	maxLogName = 255
)

// Reasons logged for decisions made here rather than by Server.Resolve.
const (
	reasonInvalidName = "invalid name"
	reasonRateLimited = "query rate limit exceeded"
	reasonMalformed   = "malformed message"
	reasonNoIPv6      = "no IPv6 address; use A"
	reasonRoot        = "the root name is not served"
	reasonNoResolver  = "no resolver configured"
	reasonNotAllowed  = "not an allowed destination"
	reasonBadAddr     = "no IPv4 address configured for this name"
)

// Verdict is what the owner decides for one name.
type Verdict struct {
	// Allow says whether the sandbox may reach the name.
	Allow bool
	// Addr is the IPv4 (loopback, transparent) address handed out for A
	// queries when Allow is set. An allowed name without a valid IPv4 Addr
	// is refused rather than answered with garbage.
	Addr netip.Addr
	// Code and Reason say why, for the log, when Allow is not set: a
	// result.Egress* code (default not_allowed) and a sentence (e.g.
	// `"evil.com" is not an allowed destination`).
	Code   string
	Reason string
}

// Query is one logged decision.
type Query struct {
	// Name is the name as asked, lower-cased, without the trailing dot,
	// truncated to 255 bytes. It may hold arbitrary bytes when the name was
	// refused as invalid; log handlers must quote it. Empty when the message
	// had no single question, and for summaries of collapsed rate-limited
	// queries.
	Name string
	// Type is the query type: "A", "AAAA", "TXT", "TYPE65", ...
	Type string
	// Transport is "udp" or "tcp".
	Transport string
	// Allow says whether the name was answered as an allowed destination.
	Allow bool
	// Answer is the address returned, if any.
	Answer netip.Addr
	// Code and Reason say why, when !Allow, and note NODATA answers to
	// AAAA: a result.Egress* code for machines, a sentence for people.
	Code   string
	Reason string
	// Duration is how long the decision took, including Resolve.
	Duration time.Duration
}

// Server answers DNS queries from one sandbox. Set its fields before the first
// call to Handle, ServeUDP or ServeTCP and do not change or copy it after;
// its methods may be called concurrently.
type Server struct {
	// Resolve decides a name (lower-case, no trailing dot, syntax already
	// validated). It is called only for class IN A and AAAA questions. A nil
	// Resolve refuses everything.
	Resolve func(name string) Verdict
	// Log receives every decision (may be nil). It must not block for long:
	// it is called on the serving goroutine.
	Log func(Query)
	// Rate and Burst cap the queries per second this server answers, as a
	// token bucket over UDP and TCP together, so a sandbox cannot burn host
	// CPU or flood the audit log through its resolver. Zero means 100/s and
	// a burst of 200. Queries over the cap are REFUSED; their log entries
	// are collapsed to at most one a second carrying a count.
	Rate  float64
	Burst int
	// MaxTCPConns bounds concurrent TCP connections (default 16); further
	// connections are closed as soon as they are accepted.
	MaxTCPConns int
	// IdleTimeout bounds the time to read one TCP message and to write its
	// answer; a connection idle for longer is closed (default 10s).
	IdleTimeout time.Duration
	// TTL is the TTL of answers in seconds (default 5). Keep it short: the
	// policy behind Resolve can change.
	TTL uint32

	// now is the rate limiter's clock; nil means time.Now. Tests set it.
	now func() time.Time

	// mu guards bucketInit, tokens, last, collapsed, limitLogged and
	// tcpConns: queries are answered on many goroutines, UDP and TCP.
	mu sync.Mutex
	// bucketInit says tokens and last hold state; the bucket starts full.
	bucketInit bool
	tokens     float64
	last       time.Time
	// collapsed counts over-limit queries refused without a log entry
	// since limitLogged.
	collapsed   int
	limitLogged time.Time
	// tcpConns counts TCP connections being served, across listeners.
	tcpConns int
}

// Handle answers one DNS message; it returns nil when the message must be
// dropped (not even a valid header to answer, or a response rather than a
// query). transport is recorded in the log.
func (s *Server) Handle(msg []byte, transport string) []byte {
	start := time.Now()
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		// Shorter than a header: there is no ID to answer to.
		return nil
	}
	if h.Response {
		// Answering responses would let two resolvers (or a spoofed
		// source) bounce messages off each other forever.
		return nil
	}

	rcode, code, reason, q, haveQ := parseRequest(&p, h)
	entry := Query{Transport: transport}
	if haveQ {
		entry.Name = logName(q.Name)
		entry.Type = typeString(q.Type)
	}
	resp := responder{req: h, q: q, haveQ: haveQ}

	allowed, logIt, collapsed := s.take()
	if !allowed {
		if logIt {
			entry.Code, entry.Reason = result.EgressCapped, limitedReason(collapsed)
			entry.Duration = time.Since(start)
			s.log(entry)
		}
		return resp.build(dnsmessage.RCodeRefused, netip.Addr{}, 0)
	}
	if collapsed > 0 {
		s.log(Query{Transport: transport, Code: result.EgressCapped, Reason: collapsedReason(collapsed)})
	}

	if rcode != dnsmessage.RCodeSuccess {
		if rcode == dnsmessage.RCodeFormatError {
			// Echoing a question of a malformed message is pointless.
			resp.haveQ = false
		}
		entry.Code, entry.Reason = code, reason
		entry.Duration = time.Since(start)
		s.log(entry)
		return resp.build(rcode, netip.Addr{}, 0)
	}

	rcode, answer := s.decide(q, &entry)
	entry.Duration = time.Since(start)
	s.log(entry)
	return resp.build(rcode, answer, s.ttl())
}

// parseRequest checks the shape of a query: opcode QUERY, exactly one
// question, and sections that parse. When rcode is not RCodeSuccess the
// message is answered with rcode, and logged with code and reason; haveQ
// says whether q holds the single question, which is echoed even in
// refusals so clients can match them.
func parseRequest(p *dnsmessage.Parser, h dnsmessage.Header) (rcode dnsmessage.RCode, code, reason string, q dnsmessage.Question, haveQ bool) {
	if h.OpCode != 0 {
		// IQUERY, STATUS, NOTIFY, UPDATE...: none has any business
		// reaching a sandbox's stub resolver, and UPDATE's sections do
		// not even mean what they mean in a query.
		return dnsmessage.RCodeNotImplemented, result.EgressMalformed, fmt.Sprintf("opcode %s is not implemented", opcodeString(h.OpCode)), q, false
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return dnsmessage.RCodeFormatError, result.EgressMalformed, reasonMalformed, q, false
	}
	if len(qs) != 1 {
		// Several questions in one message have no agreed meaning (RFC
		// 9619); answering only one would let a second name slip past the
		// log.
		return dnsmessage.RCodeFormatError, result.EgressMalformed, fmt.Sprintf("message has %d questions; want 1", len(qs)), q, false
	}
	// The other sections are ignored (EDNS OPT is tolerated), but they must
	// parse: a message we cannot read in full is not a query we answer.
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil || p.SkipAllAdditionals() != nil {
		return dnsmessage.RCodeFormatError, result.EgressMalformed, reasonMalformed, q, false
	}
	return dnsmessage.RCodeSuccess, "", "", qs[0], true
}

// decide answers one well-formed question, filling in entry's verdict. It
// returns the rcode and, for an A answer, the address.
func (s *Server) decide(q dnsmessage.Question, entry *Query) (dnsmessage.RCode, netip.Addr) {
	refuse := func(code, reason string) (dnsmessage.RCode, netip.Addr) {
		entry.Code, entry.Reason = code, reason
		return dnsmessage.RCodeRefused, netip.Addr{}
	}
	if q.Class != dnsmessage.ClassINET {
		// CHAOS (version.bind, hostname.bind) and friends would fingerprint
		// the host; nothing else lives outside class IN.
		return refuse(result.EgressQueryType, fmt.Sprintf("query class %s is not served", classString(q.Class)))
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA {
		// TXT, NULL, ANY, MX, SRV, HTTPS... are refused before Resolve
		// sees them: record types with room for data are the classic
		// tunnelling channel, and the sandbox only ever needs addresses.
		return refuse(result.EgressQueryType, fmt.Sprintf("query type %s is not served", typeString(q.Type)))
	}
	name, ok := canonicalName(q.Name)
	if !ok {
		// Strict hostname syntax stops names carrying binary or escaped
		// payloads, or odd forms that a policy matcher and a log reader
		// might interpret differently, from ever reaching Resolve.
		return refuse(result.EgressInvalidHost, reasonInvalidName)
	}
	if name == "" {
		return refuse(result.EgressInvalidHost, reasonRoot)
	}
	if s.Resolve == nil {
		return refuse(result.EgressInternal, reasonNoResolver)
	}
	v := s.Resolve(name)
	if !v.Allow {
		if v.Code == "" {
			v.Code = result.EgressNotAllowed
		}
		if v.Reason == "" {
			v.Reason = reasonNotAllowed
		}
		return refuse(v.Code, v.Reason)
	}
	if q.Type == dnsmessage.TypeAAAA {
		// The sandbox only has IPv4 transparent addresses. NODATA (not
		// NXDOMAIN, not REFUSED) tells clients the name exists, so they
		// go on to use the A answer.
		entry.Allow = true
		entry.Code, entry.Reason = result.EgressNoIPv6, reasonNoIPv6
		return dnsmessage.RCodeSuccess, netip.Addr{}
	}
	addr := v.Addr.Unmap()
	if !addr.Is4() {
		// A broken policy must not hand out an address it did not mean.
		return refuse(result.EgressInternal, reasonBadAddr)
	}
	entry.Allow = true
	entry.Answer = addr
	return dnsmessage.RCodeSuccess, addr
}

// canonicalName validates a question name and returns it lower-cased without
// the trailing dot ("" for the root). Labels must be 1-63 letters, digits,
// hyphens or underscores, and the name at most 253 characters.
func canonicalName(n dnsmessage.Name) (string, bool) {
	raw := strings.TrimSuffix(n.String(), ".")
	if raw == "" {
		return "", n.String() == "."
	}
	if len(raw) > maxNameLen {
		return "", false
	}
	// dnsmessage rejects labels containing a dot, so splitting on dots
	// recovers the wire labels exactly.
	for label := range strings.SplitSeq(raw, ".") {
		if len(label) == 0 || len(label) > maxLabelLen {
			return "", false
		}
		for i := 0; i < len(label); i++ {
			if !isNameByte(label[i]) {
				return "", false
			}
		}
	}
	return lowerASCII(raw), true
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// lowerASCII lower-cases ASCII letters only: DNS names compare
// case-insensitively for ASCII alone (RFC 4343), and other bytes are kept as
// asked.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// logName is the form of a name that goes to the log.
func logName(n dnsmessage.Name) string {
	name := n.String()
	if name != "." {
		name = strings.TrimSuffix(name, ".")
	}
	if len(name) > maxLogName {
		name = name[:maxLogName]
	}
	return lowerASCII(name)
}

func (s *Server) log(q Query) {
	if s.Log != nil {
		s.Log(q)
	}
}

func (s *Server) ttl() uint32 {
	if s.TTL == 0 {
		return defaultTTL
	}
	return s.TTL
}

// responder builds answers to one request.
type responder struct {
	req   dnsmessage.Header
	q     dnsmessage.Question
	haveQ bool
}

// build returns the response with rcode, echoing the question if there is
// one, and with one A record when answer is valid. It never adds authority
// or additional records (and so no OPT): answers stay far below 512 bytes
// and are never truncated.
func (r responder) build(rcode dnsmessage.RCode, answer netip.Addr, ttl uint32) []byte {
	h := dnsmessage.Header{
		ID:               r.req.ID,
		Response:         true,
		OpCode:           r.req.OpCode,
		Authoritative:    rcode == dnsmessage.RCodeSuccess,
		RecursionDesired: r.req.RecursionDesired,
		RCode:            rcode,
	}
	if r.haveQ {
		if msg, err := r.pack(h, answer, ttl); err == nil {
			return msg
		}
		// The question cannot be packed again; answer without it rather
		// than not at all.
	}
	h.Authoritative = false
	if rcode == dnsmessage.RCodeSuccess {
		rcode = dnsmessage.RCodeServerFailure
	}
	h.RCode = rcode
	m := dnsmessage.Message{Header: h}
	msg, err := m.Pack()
	if err != nil {
		// A bare header always packs.
		panic(fmt.Sprintf("dns: packing a bare header: %v", err))
	}
	return msg
}

func (r responder) pack(h dnsmessage.Header, answer netip.Addr, ttl uint32) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 128), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(r.q); err != nil {
		return nil, err
	}
	if answer.Is4() {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rh := dnsmessage.ResourceHeader{Name: r.q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
		if err := b.AResource(rh, dnsmessage.AResource{A: answer.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// typeString names a query type the way logs and dig do: mnemonics for
// common types, RFC 3597 "TYPEnn" for the rest.
func typeString(t dnsmessage.Type) string {
	switch t {
	case dnsmessage.TypeA:
		return "A"
	case dnsmessage.TypeNS:
		return "NS"
	case dnsmessage.TypeCNAME:
		return "CNAME"
	case dnsmessage.TypeSOA:
		return "SOA"
	case 10:
		return "NULL"
	case dnsmessage.TypePTR:
		return "PTR"
	case dnsmessage.TypeMX:
		return "MX"
	case dnsmessage.TypeTXT:
		return "TXT"
	case dnsmessage.TypeAAAA:
		return "AAAA"
	case dnsmessage.TypeSRV:
		return "SRV"
	case dnsmessage.TypeOPT:
		return "OPT"
	case dnsmessage.TypeAXFR:
		return "AXFR"
	case dnsmessage.TypeALL:
		return "ANY"
	}
	return fmt.Sprintf("TYPE%d", uint16(t))
}

// classString names a query class, RFC 3597 "CLASSnn" for unknown ones.
func classString(c dnsmessage.Class) string {
	switch c {
	case dnsmessage.ClassINET:
		return "IN"
	case dnsmessage.ClassCHAOS:
		return "CH"
	case dnsmessage.ClassHESIOD:
		return "HS"
	case 254:
		return "NONE"
	case dnsmessage.ClassANY:
		return "ANY"
	}
	return fmt.Sprintf("CLASS%d", uint16(c))
}

func opcodeString(op dnsmessage.OpCode) string {
	switch op {
	case 0:
		return "QUERY"
	case 1:
		return "IQUERY"
	case 2:
		return "STATUS"
	case 4:
		return "NOTIFY"
	case 5:
		return "UPDATE"
	}
	return fmt.Sprintf("OPCODE%d", uint16(op))
}
