package dns

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockhq/airlock/result"
)

var allowedAddr = netip.MustParseAddr("127.0.0.2")

// fakePolicy allows names under allowed.test, recording every call.
type fakePolicy struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakePolicy) resolve(name string) Verdict {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	f.mu.Unlock()
	switch {
	case name == "allowed.test" || strings.HasSuffix(name, ".allowed.test"):
		return Verdict{Allow: true, Addr: allowedAddr}
	case name == "v6only.test":
		// A broken policy: "allowed" with an address the sandbox cannot use.
		return Verdict{Allow: true, Addr: netip.MustParseAddr("::1")}
	case name == "noreason.test":
		return Verdict{}
	}
	return Verdict{Reason: fmt.Sprintf("%q is not an allowed destination", name)}
}

func (f *fakePolicy) resolved() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// logSink collects log entries.
type logSink struct {
	mu      sync.Mutex
	entries []Query
}

func (l *logSink) log(q Query) {
	l.mu.Lock()
	l.entries = append(l.entries, q)
	l.mu.Unlock()
}

func (l *logSink) all() []Query {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Query(nil), l.entries...)
}

func newTestServer() (*Server, *fakePolicy, *logSink) {
	p, l := &fakePolicy{}, &logSink{}
	return &Server{Resolve: p.resolve, Log: l.log}, p, l
}

type queryOpts struct {
	id     uint16
	opcode dnsmessage.OpCode
	class  dnsmessage.Class
	edns   bool
}

// query builds a query for name and type with dnsmessage.Builder.
func query(t testing.TB, name string, typ dnsmessage.Type, o queryOpts) []byte {
	t.Helper()
	if o.class == 0 {
		o.class = dnsmessage.ClassINET
	}
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	n, err := dnsmessage.NewName(name)
	if err != nil {
		t.Fatalf("NewName(%q): %v", name, err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: o.id, OpCode: o.opcode, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: typ, Class: o.class}); err != nil {
		t.Fatalf("Question(%q): %v", name, err)
	}
	if o.edns {
		if err := b.StartAdditionals(); err != nil {
			t.Fatal(err)
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, true); err != nil {
			t.Fatal(err)
		}
		opt := dnsmessage.OPTResource{Options: []dnsmessage.Option{{Code: 10, Data: []byte("cookie12")}}}
		if err := b.OPTResource(rh, opt); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// rawQuery encodes a query by hand, for names dnsmessage.Builder refuses
// to build. flags is the header's second 16-bit word.
func rawQuery(id, flags uint16, questions ...[]byte) []byte {
	msg := binary.BigEndian.AppendUint16(nil, id)
	msg = binary.BigEndian.AppendUint16(msg, flags)
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(questions)))
	msg = append(msg, 0, 0, 0, 0, 0, 0)
	for _, q := range questions {
		msg = append(msg, q...)
	}
	return msg
}

// rawQuestion encodes one question with the given wire labels.
func rawQuestion(typ dnsmessage.Type, class dnsmessage.Class, labels ...string) []byte {
	var q []byte
	for _, l := range labels {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0)
	q = binary.BigEndian.AppendUint16(q, uint16(typ))
	return binary.BigEndian.AppendUint16(q, uint16(class))
}

func TestHandle(t *testing.T) {
	exfil := strings.Repeat("mfrggzdfmztwq2lknnwg23tpobyxe43u", 2)[:60] // base32-looking
	label63 := strings.Repeat("a", 63)
	twoQuestions := rawQuery(7, 0x0100,
		rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "allowed", "test"),
		rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "secret", "evil", "test"))
	withGarbageTail := query(t, "allowed.test", dnsmessage.TypeA, queryOpts{id: 8})
	withGarbageTail[11] = 1 // ARCOUNT 1, but no record follows

	tests := []struct {
		name string
		msg  []byte
		// wantNil says the message is dropped.
		wantNil   bool
		wantRCode dnsmessage.RCode
		// wantAnswer is the A record expected, if any.
		wantAnswer netip.Addr
		// wantQuestion says the question is echoed.
		wantQuestion bool
		// wantResolve is the list of names passed to Resolve.
		wantResolve []string
		// wantLog is the expected log entry, Duration and Transport aside.
		wantLog Query
	}{
		{
			name:         "allowed A",
			msg:          query(t, "API.Allowed.Test", dnsmessage.TypeA, queryOpts{id: 1}),
			wantRCode:    dnsmessage.RCodeSuccess,
			wantAnswer:   allowedAddr,
			wantQuestion: true,
			wantResolve:  []string{"api.allowed.test"},
			wantLog:      Query{Name: "api.allowed.test", Type: "A", Allow: true, Answer: allowedAddr},
		},
		{
			name:         "allowed AAAA is NODATA",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeAAAA, queryOpts{id: 2}),
			wantRCode:    dnsmessage.RCodeSuccess,
			wantQuestion: true,
			wantResolve:  []string{"api.allowed.test"},
			wantLog:      Query{Name: "api.allowed.test", Type: "AAAA", Allow: true, Code: result.EgressNoIPv6, Reason: "no IPv6 address; use A"},
		},
		{
			name:         "unlisted A",
			msg:          query(t, "evil.test", dnsmessage.TypeA, queryOpts{id: 3}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{"evil.test"},
			wantLog:      Query{Name: "evil.test", Type: "A", Code: result.EgressNotAllowed, Reason: `"evil.test" is not an allowed destination`},
		},
		{
			name:         "unlisted AAAA",
			msg:          query(t, "evil.test", dnsmessage.TypeAAAA, queryOpts{id: 4}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{"evil.test"},
			wantLog:      Query{Name: "evil.test", Type: "AAAA", Code: result.EgressNotAllowed, Reason: `"evil.test" is not an allowed destination`},
		},
		{
			name:         "denial without a reason gets one",
			msg:          query(t, "noreason.test", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{"noreason.test"},
			wantLog:      Query{Name: "noreason.test", Type: "A", Code: result.EgressNotAllowed, Reason: "not an allowed destination"},
		},
		{
			name:         "allowed without an IPv4 address",
			msg:          query(t, "v6only.test", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{"v6only.test"},
			wantLog:      Query{Name: "v6only.test", Type: "A", Code: result.EgressInternal, Reason: reasonBadAddr},
		},
		{
			name:         "exfiltration labels of an unlisted name",
			msg:          query(t, strings.Join([]string{exfil, exfil, exfil, exfil, "evil.test"}, "."), dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{strings.Join([]string{exfil, exfil, exfil, exfil, "evil.test"}, ".")},
			wantLog: Query{Name: strings.Join([]string{exfil, exfil, exfil, exfil, "evil.test"}, "."), Type: "A", Code: result.EgressNotAllowed,
				Reason: fmt.Sprintf("%q is not an allowed destination", strings.Join([]string{exfil, exfil, exfil, exfil, "evil.test"}, "."))},
		},
		{
			name:         "name of 253 characters reaches Resolve",
			msg:          query(t, strings.Join([]string{label63, label63, label63, strings.Repeat("b", 61)}, "."), dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantResolve:  []string{strings.Join([]string{label63, label63, label63, strings.Repeat("b", 61)}, ".")},
			wantLog: Query{Name: strings.Join([]string{label63, label63, label63, strings.Repeat("b", 61)}, "."), Type: "A", Code: result.EgressNotAllowed,
				Reason: fmt.Sprintf("%q is not an allowed destination", strings.Join([]string{label63, label63, label63, strings.Repeat("b", 61)}, "."))},
		},
		{
			name:      "name of 254 characters",
			msg:       rawQuery(9, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, label63, label63, label63, strings.Repeat("b", 62))),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			// 64 does not fit a label's length byte: 0x40 is a reserved
			// label type, so the message does not parse.
			name:      "64-character label",
			msg:       rawQuery(10, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, strings.Repeat("a", 64), "allowed", "test")),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			name:      "dot inside a label",
			msg:       rawQuery(10, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "x.allowed", "test")),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			name:         "NUL byte in label",
			msg:          rawQuery(11, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "a\x00b", "allowed", "test")),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "a\x00b.allowed.test", Type: "A", Code: result.EgressInvalidHost, Reason: "invalid name"},
		},
		{
			name:         "space in label",
			msg:          query(t, "a b.allowed.test", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "a b.allowed.test", Type: "A", Code: result.EgressInvalidHost, Reason: "invalid name"},
		},
		{
			name:         "escaped byte in label",
			msg:          query(t, `\065.allowed.test`, dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: `\065.allowed.test`, Type: "A", Code: result.EgressInvalidHost, Reason: "invalid name"},
		},
		{
			name:         "non-ASCII label",
			msg:          query(t, "bücher.allowed.test", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "bücher.allowed.test", Type: "A", Code: result.EgressInvalidHost, Reason: "invalid name"},
		},
		{
			name:         "underscore and hyphen are fine",
			msg:          query(t, "_svc.my-api.allowed.test", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeSuccess,
			wantAnswer:   allowedAddr,
			wantQuestion: true,
			wantResolve:  []string{"_svc.my-api.allowed.test"},
			wantLog:      Query{Name: "_svc.my-api.allowed.test", Type: "A", Allow: true, Answer: allowedAddr},
		},
		{
			name:         "root name",
			msg:          query(t, ".", dnsmessage.TypeA, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: ".", Type: "A", Code: result.EgressInvalidHost, Reason: reasonRoot},
		},
		{
			name:         "TXT for an allowed name",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeTXT, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "api.allowed.test", Type: "TXT", Code: result.EgressQueryType, Reason: "query type TXT is not served"},
		},
		{
			name:         "NULL for an allowed name",
			msg:          query(t, "api.allowed.test", 10, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "api.allowed.test", Type: "NULL", Code: result.EgressQueryType, Reason: "query type NULL is not served"},
		},
		{
			name:         "HTTPS for an allowed name",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeHTTPS, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "api.allowed.test", Type: "TYPE65", Code: result.EgressQueryType, Reason: "query type TYPE65 is not served"},
		},
		{
			name:         "ANY for an allowed name",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeALL, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "api.allowed.test", Type: "ANY", Code: result.EgressQueryType, Reason: "query type ANY is not served"},
		},
		{
			name:         "MX for an allowed name",
			msg:          query(t, "allowed.test", dnsmessage.TypeMX, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "allowed.test", Type: "MX", Code: result.EgressQueryType, Reason: "query type MX is not served"},
		},
		{
			name:         "PTR",
			msg:          query(t, "2.0.0.127.in-addr.arpa", dnsmessage.TypePTR, queryOpts{}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "2.0.0.127.in-addr.arpa", Type: "PTR", Code: result.EgressQueryType, Reason: "query type PTR is not served"},
		},
		{
			name:         "class CH",
			msg:          query(t, "version.bind", dnsmessage.TypeTXT, queryOpts{class: dnsmessage.ClassCHAOS}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "version.bind", Type: "TXT", Code: result.EgressQueryType, Reason: "query class CH is not served"},
		},
		{
			name:         "class CH A for an allowed name",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{class: dnsmessage.ClassCHAOS}),
			wantRCode:    dnsmessage.RCodeRefused,
			wantQuestion: true,
			wantLog:      Query{Name: "api.allowed.test", Type: "A", Code: result.EgressQueryType, Reason: "query class CH is not served"},
		},
		{
			name:         "EDNS OPT is tolerated",
			msg:          query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 12, edns: true}),
			wantRCode:    dnsmessage.RCodeSuccess,
			wantAnswer:   allowedAddr,
			wantQuestion: true,
			wantResolve:  []string{"api.allowed.test"},
			wantLog:      Query{Name: "api.allowed.test", Type: "A", Allow: true, Answer: allowedAddr},
		},
		{
			name:      "two questions",
			msg:       twoQuestions,
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: "message has 2 questions; want 1"},
		},
		{
			name:      "no question",
			msg:       rawQuery(13, 0x0100),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: "message has 0 questions; want 1"},
		},
		{
			name:      "opcode STATUS",
			msg:       query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{opcode: 2}),
			wantRCode: dnsmessage.RCodeNotImplemented,
			wantLog:   Query{Code: result.EgressMalformed, Reason: "opcode STATUS is not implemented"},
		},
		{
			name:      "opcode UPDATE",
			msg:       query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{opcode: 5}),
			wantRCode: dnsmessage.RCodeNotImplemented,
			wantLog:   Query{Code: result.EgressMalformed, Reason: "opcode UPDATE is not implemented"},
		},
		{
			name:    "response message",
			msg:     rawQuery(14, 0x8180, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "allowed", "test")),
			wantNil: true,
		},
		{
			name:    "shorter than a header",
			msg:     []byte{0xde, 0xad, 0x01, 0x00, 0x00},
			wantNil: true,
		},
		{
			name:    "empty",
			msg:     nil,
			wantNil: true,
		},
		{
			name:      "header claiming a question that is cut off",
			msg:       rawQuery(15, 0x0100, []byte{7, 'a', 'l'}),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			name:      "bare header with counts and nothing else",
			msg:       []byte{0, 16, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0},
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			name:      "additional record cut off",
			msg:       withGarbageTail,
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
		{
			name:      "compression pointer loop",
			msg:       rawQuery(17, 0x0100, []byte{0xc0, 12, 0, 1, 0, 1}),
			wantRCode: dnsmessage.RCodeFormatError,
			wantLog:   Query{Code: result.EgressMalformed, Reason: reasonMalformed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, policy, logs := newTestServer()
			resp := s.Handle(tt.msg, "udp")

			gotLogs := logs.all()
			if tt.wantNil {
				if resp != nil {
					t.Errorf("Handle = %x, want nil", resp)
				}
				if len(gotLogs) != 0 {
					t.Errorf("got log entries %+v for a dropped message, want none", gotLogs)
				}
				return
			}
			if resp == nil {
				t.Fatal("Handle = nil, want a response")
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatalf("response does not parse: %v", err)
			}
			if got, want := m.ID, binary.BigEndian.Uint16(tt.msg); got != want {
				t.Errorf("ID = %d, want %d", got, want)
			}
			if !m.Response || m.RecursionAvailable || m.Truncated {
				t.Errorf("QR, RA, TC = %v, %v, %v, want true, false, false", m.Response, m.RecursionAvailable, m.Truncated)
			}
			if got, want := m.RCode, tt.wantRCode; got != want {
				t.Errorf("RCode = %v, want %v", got, want)
			}
			if got, want := m.Authoritative, tt.wantRCode == dnsmessage.RCodeSuccess; got != want {
				t.Errorf("AA = %v, want %v", got, want)
			}
			if len(m.Authorities) != 0 || len(m.Additionals) != 0 {
				t.Errorf("got %d authority and %d additional records, want none", len(m.Authorities), len(m.Additionals))
			}
			if tt.wantQuestion {
				var req dnsmessage.Message
				if err := req.Unpack(tt.msg); err != nil {
					t.Fatalf("request does not parse: %v", err)
				}
				if len(m.Questions) != 1 || m.Questions[0] != req.Questions[0] {
					t.Errorf("questions = %v, want %v", m.Questions, req.Questions)
				}
			} else if len(m.Questions) != 0 {
				t.Errorf("questions = %v, want none", m.Questions)
			}
			var gotAnswer netip.Addr
			switch len(m.Answers) {
			case 0:
			case 1:
				a, ok := m.Answers[0].Body.(*dnsmessage.AResource)
				if !ok {
					t.Fatalf("answer is %T, want an A record", m.Answers[0].Body)
				}
				gotAnswer = netip.AddrFrom4(a.A)
				if got, want := m.Answers[0].Header.TTL, uint32(defaultTTL); got != want {
					t.Errorf("TTL = %d, want %d", got, want)
				}
				if got, want := m.Answers[0].Header.Name, m.Questions[0].Name; got != want {
					t.Errorf("answer name = %v, want %v", got, want)
				}
			default:
				t.Errorf("got %d answers, want at most 1", len(m.Answers))
			}
			if gotAnswer != tt.wantAnswer {
				t.Errorf("answer = %v, want %v", gotAnswer, tt.wantAnswer)
			}
			if got, want := policy.resolved(), tt.wantResolve; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("Resolve calls = %q, want %q", got, want)
			}
			if len(gotLogs) != 1 {
				t.Fatalf("got %d log entries %+v, want 1", len(gotLogs), gotLogs)
			}
			got := gotLogs[0]
			if got.Transport != "udp" {
				t.Errorf("log Transport = %q, want udp", got.Transport)
			}
			if got.Duration < 0 {
				t.Errorf("log Duration = %v, want >= 0", got.Duration)
			}
			got.Transport, got.Duration = "", 0
			if got != tt.wantLog {
				t.Errorf("log entry = %+v, want %+v", got, tt.wantLog)
			}
		})
	}
}

func TestHandleTTLAndFlags(t *testing.T) {
	s, _, _ := newTestServer()
	s.TTL = 42
	req := query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 0xbeef})
	var m dnsmessage.Message
	if err := m.Unpack(s.Handle(req, "tcp")); err != nil {
		t.Fatal(err)
	}
	if len(m.Answers) != 1 {
		t.Fatalf("got %d answers, want 1", len(m.Answers))
	}
	if got, want := m.Answers[0].Header.TTL, uint32(42); got != want {
		t.Errorf("TTL = %d, want %d", got, want)
	}
	if !m.RecursionDesired {
		t.Errorf("RD = false, want it copied from the query")
	}
}

func TestHandleNilResolveRefuses(t *testing.T) {
	logs := &logSink{}
	s := &Server{Log: logs.log}
	var m dnsmessage.Message
	if err := m.Unpack(s.Handle(query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{}), "udp")); err != nil {
		t.Fatal(err)
	}
	if got, want := m.RCode, dnsmessage.RCodeRefused; got != want {
		t.Errorf("RCode = %v, want %v", got, want)
	}
	if got := logs.all(); len(got) != 1 || got[0].Reason != reasonNoResolver {
		t.Errorf("log = %+v, want one entry with reason %q", got, reasonNoResolver)
	}
}

func TestLogNameTruncated(t *testing.T) {
	// A Name of 255 bytes is more than the wire allows, so build one by
	// hand to check the log bound holds whatever dnsmessage accepts.
	var n dnsmessage.Name
	long := strings.Repeat("A", 254)
	n.Length = uint8(copy(n.Data[:], long+"."))
	got := logName(n)
	if want := strings.Repeat("a", 254); got != want {
		t.Errorf("logName = %q, want %q", got, want)
	}
	n.Length = uint8(copy(n.Data[:], strings.Repeat("x", 255)))
	if got := logName(n); len(got) != maxLogName {
		t.Errorf("len(logName) = %d, want %d", len(got), maxLogName)
	}
}

func rcodeOf(t testing.TB, resp []byte) dnsmessage.RCode {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		t.Fatalf("response does not parse: %v", err)
	}
	return h.RCode
}

func TestRateLimit(t *testing.T) {
	s, _, logs := newTestServer()
	s.Rate, s.Burst = 10, 5
	req := query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{})

	start := time.Now()
	var answered, refused int
	for range 50 {
		switch rc := rcodeOf(t, s.Handle(req, "udp")); rc {
		case dnsmessage.RCodeSuccess:
			answered++
		case dnsmessage.RCodeRefused:
			refused++
		default:
			t.Fatalf("RCode = %v, want success or refused", rc)
		}
	}
	elapsed := time.Since(start)

	// The bucket holds 5 and refills at 10/s while the loop runs.
	maxAnswered := 5 + int(elapsed.Seconds()*10) + 1
	if answered < 5 || answered > maxAnswered {
		t.Errorf("answered %d of 50, want 5..%d", answered, maxAnswered)
	}
	var limited, accounted int
	for _, e := range logs.all() {
		if e.Code != result.EgressCapped {
			continue
		}
		limited++
		accounted++
		var n int
		if _, err := fmt.Sscanf(e.Reason, reasonRateLimited+" (%d quer", &n); err == nil {
			accounted += n
		}
	}
	if maxEntries := 1 + int(elapsed.Seconds()) + 1; limited > maxEntries {
		t.Errorf("got %d rate-limit log entries for %d refusals in %v, want at most %d", limited, refused, elapsed, maxEntries)
	}
	// Flushing at the end reports the rest, so every refusal is counted.
	s.flushLimitLog("udp")
	all := logs.all()
	last := all[len(all)-1]
	var n int
	if _, err := fmt.Sscanf(last.Reason, reasonRateLimited+" (%d quer", &n); err == nil {
		accounted += n
	}
	if accounted != refused {
		t.Errorf("log accounts for %d refusals, want %d", accounted, refused)
	}
}

// TestRateLimitCollapse drives the limiter with a fake clock.
func TestRateLimitCollapse(t *testing.T) {
	s, _, logs := newTestServer()
	now := time.Unix(1_000_000, 0)
	s.now = func() time.Time { return now }
	req := query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{})

	send := func(n int) (answered int) {
		for range n {
			if rcodeOf(t, s.Handle(req, "tcp")) == dnsmessage.RCodeSuccess {
				answered++
			}
		}
		return answered
	}
	reasons := func() []string {
		var r []string
		for _, e := range logs.all() {
			if !e.Allow {
				r = append(r, e.Reason)
			}
		}
		return r
	}

	// Rate 0.5/s: the bucket refills one token every two seconds.
	const (
		first  = "query rate limit exceeded"
		after3 = "query rate limit exceeded (19 queries before this one not logged)"
		flush3 = "query rate limit exceeded (3 queries not logged)"
		flush6 = "query rate limit exceeded (1 query not logged)"
	)
	s.Rate, s.Burst = 0.5, 2
	steps := []struct {
		advance      time.Duration
		send         int
		flush        bool // call flushLimitLog, as Serve* do on return
		wantAnswered int
		wantReasons  []string // log reasons of refusals so far
	}{
		{advance: 0, send: 2, wantAnswered: 2},
		{advance: 0, send: 10, wantReasons: []string{first}},
		{advance: 500 * time.Millisecond, send: 10, wantReasons: []string{first}},
		{advance: 600 * time.Millisecond, send: 1, wantReasons: []string{first, after3}},
		{advance: 500 * time.Millisecond, send: 3, wantReasons: []string{first, after3}},
		// One token again: the admitted query first reports the 3
		// collapsed refusals; the next refusal is within the second.
		{advance: 500 * time.Millisecond, send: 2, wantAnswered: 1, wantReasons: []string{first, after3, flush3}},
		{flush: true, wantReasons: []string{first, after3, flush3, flush6}},
		{flush: true, wantReasons: []string{first, after3, flush3, flush6}},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if st.flush {
			s.flushLimitLog("tcp")
		}
		if got := send(st.send); got != st.wantAnswered {
			t.Errorf("step %d: answered %d, want %d", i, got, st.wantAnswered)
		}
		if got, want := reasons(), st.wantReasons; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("step %d: refusal log = %q, want %q", i, got, want)
		}
	}
}

func TestHandleConcurrent(t *testing.T) {
	s, _, logs := newTestServer()
	s.Rate, s.Burst = 1e9, 1000
	req := query(t, "api.allowed.test", dnsmessage.TypeA, queryOpts{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if rc := rcodeOf(t, s.Handle(req, "tcp")); rc != dnsmessage.RCodeSuccess {
					t.Errorf("RCode = %v, want success", rc)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, want := len(logs.all()), 400; got != want {
		t.Errorf("got %d log entries, want %d", got, want)
	}
}
