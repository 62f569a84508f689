package policy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

// testSpecs is the policy the Match and Lookup tests run against. The
// comments give each entry's index.
var testSpecs = []Spec{
	{Host: "api.example.com"},                        // 0
	{Host: "*.example.com", Ports: []int{443, 8443}}, // 1
	{Host: "*.google.internal"},                      // 2: covers metadata.google.internal by syntax
	{Host: "*.ec2.internal"},                         // 3
	{Host: "git.example.org:22"},                     // 4
	{Host: "git.example.org:443"},                    // 5
	{Host: "203.0.113.0/24:443", Private: true},      // 6
	{Host: "8.8.8.8:53"},                             // 7
	{Host: "[2606:4700::/32]:443"},                   // 8
	{Host: "127.0.0.1:8080", Private: true},          // 9
	{Host: "[::1]:8080", Private: true},              // 10
	{Host: "localhost:8080", Private: true},          // 11
	{Host: "[::ffff:8.8.4.4]:53", Private: true},     // 12
}

func testPolicy(t *testing.T) (*Policy, []Destination) {
	t.Helper()
	var dests []Destination
	for _, s := range testSpecs {
		d, err := Compile(s)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", s, err)
		}
		dests = append(dests, d)
	}
	return New(dests), dests
}

func TestMatch(t *testing.T) {
	p, dests := testPolicy(t)
	const deny = -1
	tests := []struct {
		host   string
		port   uint16
		want   int    // index into testSpecs, or deny
		reason string // substring of the reason
	}{
		// Names: exact, case, trailing dot.
		{"api.example.com", 443, 0, `"api.example.com" matches api.example.com:443`},
		{"API.EXAMPLE.COM", 443, 0, "matches api.example.com:443"},
		{"api.example.com.", 443, 0, "matches api.example.com:443"},
		// The wildcard covers api.example.com too; its ports join in.
		{"api.example.com", 8443, 1, "matches *.example.com:443,8443"},
		{"api.example.com", 22, deny, `port 22 is not allowed for "api.example.com" (allowed: 443,8443)`},
		{"api.example.com..", 443, deny, "empty label"},
		// Wildcards: strict subdomains only, on a label boundary.
		{"www.example.com", 443, 1, `"www.example.com" matches *.example.com:443,8443`},
		{"a.b.example.com", 8443, 1, "matches *.example.com"},
		{"A_B.Example.Com.", 443, 1, "matches *.example.com"},
		{"example.com", 443, deny, `"example.com" is not an allowed destination`},
		{"evilexample.com", 443, deny, "is not an allowed destination"},
		{"example.com.evil.com", 443, deny, "is not an allowed destination"},
		{"www.example.com", 80, deny, `port 80 is not allowed for "www.example.com" (allowed: 443,8443)`},
		{"evil.com", 443, deny, `"evil.com" is not an allowed destination`},
		// Cloud metadata names are refused though a wildcard covers them.
		{"metadata.google.internal", 443, deny, `"metadata.google.internal" is a cloud metadata name (never allowed)`},
		{"METADATA.GOOGLE.INTERNAL.", 443, deny, "cloud metadata name"},
		{"other.google.internal", 443, 2, "matches *.google.internal:443"},
		{"instance-data.ec2.internal", 443, deny, "cloud metadata name"},
		{"metadata", 443, deny, "cloud metadata name"},
		// Several destinations for one name: the first allowing the port wins.
		{"git.example.org", 22, 4, "matches git.example.org:22"},
		{"git.example.org", 443, 5, "matches git.example.org:443"},
		{"git.example.org", 80, deny, `port 80 is not allowed for "git.example.org" (allowed: 22,443)`},
		// Invalid names are refused, not resolved.
		{"", 443, deny, "empty host"},
		{"exa mple.example.com", 443, deny, "white space"},
		{"bücher.example.com", 443, deny, "punycode"},
		{"\u212a.example.com", 443, deny, "punycode"},
		{"*.example.com", 443, deny, "labels may hold only"},
		{"api.example.com:443", 443, deny, "not a valid IPv6 address"},
		{"evil.com\x00.example.com", 443, deny, "control characters"},
		{strings.Repeat("a.", 200) + "example.com", 443, deny, "at most 253"},

		// IP literals in every spelling, against IP destinations only.
		{"203.0.113.5", 443, 6, "203.0.113.5 matches 203.0.113.0/24:443"},
		{"0xCB.0.0x71.5", 443, 6, `"0xCB.0.0x71.5" (203.0.113.5) matches 203.0.113.0/24:443`},
		{"3405803781", 443, 6, "matches 203.0.113.0/24"},
		{"0313.0.0161.05", 443, 6, "matches 203.0.113.0/24"},
		{"203.0.28933", 443, 6, "matches 203.0.113.0/24"},
		{"203.0.113.5.", 443, 6, "matches 203.0.113.0/24"},
		{"203.0.113.5", 80, deny, "port 80 is not allowed for 203.0.113.5 (allowed: 443)"},
		{"203.0.114.1", 443, deny, "203.0.114.1 is not an allowed destination"},
		{"8.8.8.8", 53, 7, "matches 8.8.8.8:53"},
		{"134744072", 53, 7, `"134744072" (8.8.8.8) matches 8.8.8.8:53`},
		{"0x8.0x8.0x8.0x8", 53, 7, "matches 8.8.8.8:53"},
		{"8.8.2056", 53, 7, "matches 8.8.8.8:53"},
		{"010.010.010.010", 53, 7, `"010.010.010.010" (8.8.8.8) matches 8.8.8.8:53`},
		{"[2606:4700::1111]", 443, 8, `"[2606:4700::1111]" (2606:4700::1111) matches [2606:4700::/32]:443`},
		{"2606:4700::1111", 443, 8, "2606:4700::1111 matches [2606:4700::/32]:443"},
		{"2606:4700:0:0:0:0:0:1111", 443, 8, "matches [2606:4700::/32]:443"},
		{"[2606:4700::1111]", 80, deny, "port 80 is not allowed"},
		// An IPv4-mapped address matches only an IPv4-mapped destination.
		{"::ffff:8.8.8.8", 53, deny, "::ffff:8.8.8.8 is not an allowed destination"},
		{"::ffff:8.8.4.4", 53, 12, "matches [::ffff:8.8.4.4]:53"},
		{"8.8.4.4", 53, deny, "is not an allowed destination"},
		// Loopback: the IP destination and the name destination are separate.
		{"127.0.0.1", 8080, 9, "matches 127.0.0.1:8080"},
		{"127.1", 8080, 9, `"127.1" (127.0.0.1) matches 127.0.0.1:8080`},
		{"0x7f000001", 8080, 9, "matches 127.0.0.1:8080"},
		{"017700000001", 8080, 9, "matches 127.0.0.1:8080"},
		{"0x7f.1", 8080, 9, "matches 127.0.0.1:8080"},
		{"2130706433", 8080, 9, "matches 127.0.0.1:8080"},
		{"127.0.0.1.", 8080, 9, "matches 127.0.0.1:8080"},
		{"127.0.0.2", 8080, deny, "127.0.0.2 is not an allowed destination"},
		{"[::1]", 8080, 10, "matches [::1]:8080"},
		{"::ffff:127.0.0.1", 8080, deny, "is not an allowed destination"},
		{"localhost", 8080, 11, `"localhost" matches localhost:8080`},
		{"LOCALHOST.", 8080, 11, "matches localhost:8080"},
		// Never-allowed addresses, in any spelling, with their own reason.
		{"169.254.169.254", 80, deny, "address 169.254.169.254 is a cloud metadata endpoint (never allowed)"},
		{"2852039166", 80, deny, `host "2852039166": address 169.254.169.254 is a cloud metadata endpoint (never allowed)`},
		{"0xA9FEA9FE", 80, deny, "cloud metadata endpoint"},
		{"0251.0376.0251.0376", 80, deny, "cloud metadata endpoint"},
		{"0xa9.0xfe.0xa9.0xfe", 80, deny, "cloud metadata endpoint"},
		{"[::ffff:169.254.169.254]", 80, deny, "IPv4-mapped form of 169.254.169.254"},
		{"::ffff:a9fe:a9fe", 80, deny, "IPv4-mapped form of 169.254.169.254"},
		{"[64:ff9b::a9fe:a9fe]", 80, deny, "NAT64 form of 169.254.169.254"},
		{"[2002:a9fe:a9fe::1]", 80, deny, "6to4 form of 169.254.169.254"},
		{"[2001:0:4136:e378:8000:63bf:5601:5601]", 80, deny, "Teredo form of 169.254.169.254"},
		{"[fd00:ec2::254]", 80, deny, "cloud metadata endpoint"},
		{"0.0.0.0", 8080, deny, "unspecified (never allowed)"},
		{"0", 8080, deny, "unspecified (never allowed)"},
		{"[::]", 8080, deny, "unspecified (never allowed)"},
		{"255.255.255.255", 443, deny, "broadcast"},
		{"224.0.0.1", 443, deny, "multicast"},
		{"[fe80::1]", 443, deny, "link-local"},
		// Numeric-looking hosts that are not addresses are refused.
		{"256.1.1.1", 443, deny, `host "256.1.1.1" looks like an IPv4 address but is not a valid one: part "256" is more than 255; refused rather than resolved`},
		{"1.2.3.4.5", 443, deny, "looks like an IPv4 address"},
		{"0x", 443, deny, "no hex digits"},
		{"08.1.1.1", 443, deny, "not a base-8 digit"},
		{"4294967296", 443, deny, "too large"},
		{"1..2", 443, deny, "empty part"},
		{"[fe80::1%25eth0]", 443, deny, "zone"},
		{"fe80::1%eth0", 443, deny, "zone"},
		{"[::1]:8080", 8080, deny, "without a closing"},
		{"203.0.113.5", 0, deny, "port 0 is not allowed"},
	}
	for _, tt := range tests {
		d, got := p.Match(tt.host, tt.port)
		if !strings.Contains(got.Reason, tt.reason) {
			t.Errorf("Match(%q, %d) reason = %q, want it to contain %q", tt.host, tt.port, got.Reason, tt.reason)
		}
		if tt.want == deny {
			if got.Allow || d != nil {
				t.Errorf("Match(%q, %d) = %v, %+v; want denied", tt.host, tt.port, d, got)
			}
			continue
		}
		if !got.Allow || d == nil || !d.Equal(dests[tt.want]) {
			t.Errorf("Match(%q, %d) = %v, %+v; want allowed by %v", tt.host, tt.port, d, got, dests[tt.want])
		}
	}
}

func TestMatchLongHostReasonIsShort(t *testing.T) {
	p, _ := testPolicy(t)
	for _, host := range []string{
		strings.Repeat("a", 100000),
		strings.Repeat("1", 100000),
		strings.Repeat("a.", 50000) + "example.com",
	} {
		_, got := p.Match(host, 443)
		if got.Allow || len(got.Reason) > 600 {
			t.Errorf("Match(%d-byte host) = Allow %v with a %d-byte reason, want a short denial", len(host), got.Allow, len(got.Reason))
		}
	}
}

// TestMatchChecksHandBuiltDestinations checks that Match applies ipclass
// rules even to destinations that did not come from Compile.
func TestMatchChecksHandBuiltDestinations(t *testing.T) {
	p := New([]Destination{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []uint16{443}},
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Ports: []uint16{443}},
		{Name: "internal", Wildcard: true, Ports: []uint16{443}},
	})
	tests := []struct {
		host, code, reason string
	}{
		{"10.0.0.1", result.EgressPrivate, "address 10.0.0.1 is private"},
		{"169.254.169.254", result.EgressMetadata, "cloud metadata endpoint (never allowed)"},
		{"0xA9FEA9FE", result.EgressMetadata, "cloud metadata endpoint (never allowed)"},
		{"metadata.google.internal", result.EgressMetadata, "cloud metadata name"},
		{"fe80::1", result.EgressLinkLocal, "link-local"},
		{"256.1.1.1", result.EgressInvalidHost, "looks like an IPv4 address"},
		{"example.com", result.EgressNotAllowed, "is not an allowed destination"},
	}
	for _, tt := range tests {
		d, got := p.Match(tt.host, 443)
		if d != nil || got.Allow || got.Code != tt.code || !strings.Contains(got.Reason, tt.reason) {
			t.Errorf("Match(%q, 443) = %v, %+v; want denied (%s) with %q", tt.host, d, got, tt.code, tt.reason)
		}
	}
	if d, got := p.Match("a.internal", 80); d != nil || got.Code != result.EgressNotAllowed || !strings.Contains(got.Reason, "port 80") {
		t.Errorf("Match(a.internal, 80) = %v, %+v; want denied (%s) for its port", d, got, result.EgressNotAllowed)
	}
	if d, got := p.Match("8.8.8.8", 443); d == nil || !got.Allow {
		t.Errorf("Match(8.8.8.8, 443) = %v, %+v; want allowed by 0.0.0.0/0", d, got)
	}
}

func TestNilAndEmptyPolicy(t *testing.T) {
	for _, p := range []*Policy{nil, New(nil)} {
		if d, got := p.Match("api.example.com", 443); d != nil || got.Allow || !strings.Contains(got.Reason, "is not an allowed destination") {
			t.Errorf("%v.Match = %v, %+v; want denied", p, d, got)
		}
		if d, got := p.Match("8.8.8.8", 443); d != nil || got.Allow {
			t.Errorf("%v.Match(8.8.8.8) = %v, %+v; want denied", p, d, got)
		}
		if d := p.Lookup("api.example.com"); d != nil {
			t.Errorf("%v.Lookup = %v, want nil", p, d)
		}
		if ds := p.Destinations(); len(ds) != 0 {
			t.Errorf("%v.Destinations() = %v, want none", p, ds)
		}
	}
}

func TestLookup(t *testing.T) {
	p, dests := testPolicy(t)
	tests := []struct {
		name string
		want int // index into testSpecs, or -1 for nil
	}{
		{"api.example.com", 0},
		{"API.Example.com.", 0},
		{"x.example.com", 1},
		{"x.y.example.com.", 1},
		{"example.com", -1},
		{"evilexample.com", -1},
		{"git.example.org", 4},
		{"other.google.internal", 2},
		{"metadata.google.internal", -1},
		{"metadata.google.internal.", -1},
		{"instance-data.ec2.internal", -1},
		{"localhost", 11},
		{"evil.com", -1},
		{"", -1},
		{".", -1},
		{"8.8.8.8", -1},
		{"127.1", -1},
		{"2852039166", -1},
		{"256.1.1.1", -1},
		{"::1", -1},
		{"bücher.example.com", -1},
		{"a..example.com", -1},
	}
	for _, tt := range tests {
		got := p.Lookup(tt.name)
		if tt.want < 0 {
			if got != nil {
				t.Errorf("Lookup(%q) = %v, want nil", tt.name, got)
			}
			continue
		}
		if got == nil || !got.Equal(dests[tt.want]) {
			t.Errorf("Lookup(%q) = %v, want %v", tt.name, got, dests[tt.want])
		}
	}
}

func TestPolicyCopiesDestinations(t *testing.T) {
	dests := []Destination{{Name: "example.com", Ports: []uint16{443}}}
	p := New(dests)
	dests[0].Ports[0] = 22
	dests[0].Name = "evil.com"
	if _, got := p.Match("example.com", 443); !got.Allow {
		t.Errorf("changing the slice given to New changed the policy: %+v", got)
	}
	out := p.Destinations()
	out[0].Ports[0] = 22
	if _, got := p.Match("example.com", 443); !got.Allow {
		t.Errorf("changing the slice from Destinations changed the policy: %+v", got)
	}
}
