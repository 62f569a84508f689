package dns

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzHandle feeds Handle arbitrary bytes, as a hostile sandbox would.
func FuzzHandle(f *testing.F) {
	for _, seed := range [][]byte{
		query(f, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 1}),
		query(f, "api.allowed.test", dnsmessage.TypeAAAA, queryOpts{id: 2, edns: true}),
		query(f, "Evil.Test", dnsmessage.TypeA, queryOpts{id: 3}),
		query(f, "api.allowed.test", dnsmessage.TypeTXT, queryOpts{id: 4}),
		query(f, "version.bind", dnsmessage.TypeTXT, queryOpts{id: 5, class: dnsmessage.ClassCHAOS}),
		query(f, "api.allowed.test", dnsmessage.TypeA, queryOpts{id: 6, opcode: 2}),
		query(f, ".", dnsmessage.TypeNS, queryOpts{id: 7}),
		rawQuery(8, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "a\x00b", "allowed", "test")),
		rawQuery(9, 0x0100, []byte{0xc0, 12, 0, 1, 0, 1}),
		rawQuery(10, 0x0100, rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "x"), rawQuestion(dnsmessage.TypeA, dnsmessage.ClassINET, "y")),
		{0, 1, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0},
		{0xff},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var resolved []string
		var logs []Query
		s := &Server{
			Resolve: func(name string) Verdict {
				resolved = append(resolved, name)
				if name != strings.ToLower(name) {
					t.Errorf("Resolve(%q): name not lower-cased", name)
				}
				if _, ok := canonicalName(mustName(t, name+".")); !ok {
					t.Errorf("Resolve(%q): invalid name reached Resolve", name)
				}
				if strings.HasSuffix(name, "allowed.test") {
					return Verdict{Allow: true, Addr: allowedAddr}
				}
				return Verdict{Reason: "no"}
			},
			Log: func(q Query) { logs = append(logs, q) },
		}
		resp := s.Handle(msg, "udp")
		if resp == nil {
			if len(msg) >= 12 && msg[2]&0x80 == 0 {
				t.Errorf("dropped a query with a full header: %x", msg)
			}
			if len(logs) != 0 {
				t.Errorf("logged %+v for a dropped message", logs)
			}
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("response %x does not parse: %v", resp, err)
		}
		if !m.Response {
			t.Errorf("response lacks QR")
		}
		if len(msg) >= 2 {
			if got, want := m.ID, binary.BigEndian.Uint16(msg); got != want {
				t.Errorf("ID = %d, want %d", got, want)
			}
		}
		if len(resp) > 512 {
			t.Errorf("response is %d bytes, want at most 512", len(resp))
		}
		if len(m.Authorities) != 0 || len(m.Additionals) != 0 || len(m.Answers) > 1 {
			t.Errorf("response has %d/%d/%d answer/authority/additional records", len(m.Answers), len(m.Authorities), len(m.Additionals))
		}
		if len(m.Answers) == 1 {
			if a, ok := m.Answers[0].Body.(*dnsmessage.AResource); !ok || a.A != allowedAddr.As4() {
				t.Errorf("answer %v, want A %v", m.Answers[0].Body, allowedAddr)
			}
		}
		if len(m.Questions) > 1 {
			t.Errorf("response echoes %d questions", len(m.Questions))
		}
		if len(resolved) > 1 {
			t.Errorf("Resolve called %d times", len(resolved))
		}
		if len(logs) != 1 {
			t.Errorf("got %d log entries, want 1", len(logs))
		}
		for _, q := range logs {
			if len(q.Name) > maxLogName {
				t.Errorf("logged name of %d bytes", len(q.Name))
			}
		}
	})
}

func mustName(t *testing.T, s string) dnsmessage.Name {
	t.Helper()
	n, err := dnsmessage.NewName(s)
	if err != nil {
		t.Fatalf("NewName(%q): %v", s, err)
	}
	return n
}
