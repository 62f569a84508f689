package ipclass

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

func TestCheck(t *testing.T) {
	const never = "(never allowed)"
	tests := []struct {
		addr string
		// Outcome without and with allowPrivate, and a substring of the
		// reason without it.
		allow, allowPrivate bool
		reason              string
	}{
		{"8.8.8.8", true, true, "address 8.8.8.8 is public"},
		{"2606:4700:4700::1111", true, true, "is public"},
		{"10.0.0.5", false, true, "address 10.0.0.5 is private"},
		{"172.16.0.1", false, true, "is private"},
		{"192.168.1.1", false, true, "is private"},
		{"fc00::1", false, true, "is private"},
		{"fec0::1", false, true, "is private"},
		{"127.0.0.1", false, true, "address 127.0.0.1 is loopback"},
		{"::1", false, true, "address ::1 is loopback"},
		{"100.64.0.1", false, true, "CGNAT"},
		{"192.0.2.1", false, true, "is reserved"},
		{"240.0.0.1", false, true, "is reserved"},
		{"2001:db8::1", false, true, "is reserved"},
		{"4000::1", false, true, "is reserved"},
		{"::ffff:8.8.8.8", false, true, "address ::ffff:8.8.8.8 is an IPv6 form of 8.8.8.8"},
		{"::ffff:10.0.0.1", false, true, "IPv6 form of 10.0.0.1"},
		{"::ffff:127.0.0.1", false, true, "IPv6 form of 127.0.0.1"},
		{"64:ff9b::808:808", false, true, "IPv6 form of 8.8.8.8"},
		{"2002:808:808::1", false, true, "IPv6 form of 8.8.8.8"},
		{"64:ff9b:1::808:808", false, true, "local-use NAT64"},
		{"64:ff9b:1:808:8:800::", false, true, "local-use NAT64"},

		{"169.254.169.254", false, false, "address 169.254.169.254 is a cloud metadata endpoint (never allowed)"},
		{"169.254.170.2", false, false, "cloud metadata endpoint"},
		{"169.254.170.23", false, false, "cloud metadata endpoint"},
		{"100.100.100.200", false, false, "cloud metadata endpoint"},
		{"192.0.0.192", false, false, "cloud metadata endpoint"},
		{"168.63.129.16", false, false, "cloud metadata endpoint"},
		{"fd00:ec2::254", false, false, "cloud metadata endpoint"},
		{"fd00:ec2::23", false, false, "cloud metadata endpoint"},
		{"169.254.0.1", false, false, "address 169.254.0.1 is link-local (never allowed)"},
		{"fe80::1", false, false, "is link-local " + never},
		{"fe80::1%eth0", false, false, "address fe80::1%eth0 has a zone"},
		{"fd00::1%eth0", false, false, "has a zone"},
		{"0.0.0.0", false, false, "is unspecified " + never},
		{"0.1.2.3", false, false, "is unspecified " + never},
		{"::", false, false, "is unspecified " + never},
		{"224.0.0.1", false, false, "is multicast " + never},
		{"ff02::1", false, false, "is multicast " + never},
		{"255.255.255.255", false, false, "is broadcast " + never},

		// Every IPv6 spelling of the metadata endpoint is refused, even for
		// a private destination.
		{"::ffff:169.254.169.254", false, false, "IPv4-mapped form of 169.254.169.254, which is a cloud metadata endpoint " + never},
		{"::ffff:a9fe:a9fe", false, false, "IPv4-mapped form of 169.254.169.254"},
		{"::ffff:0:a9fe:a9fe", false, false, "IPv4-translated form of 169.254.169.254"},
		{"::a9fe:a9fe", false, false, "IPv4-compatible form of 169.254.169.254"},
		{"64:ff9b::a9fe:a9fe", false, false, "NAT64 form of 169.254.169.254"},
		{"64:ff9b:1::a9fe:a9fe", false, false, "local-use NAT64 (/96) form of 169.254.169.254"},
		{"64:ff9b:1:0:a9:fea9:fe00:0", false, false, "local-use NAT64 (/64) form of 169.254.169.254"},
		{"64:ff9b:1:a9:fe:a9fe::", false, false, "local-use NAT64 (/56) form of 169.254.169.254"},
		{"64:ff9b:1:a9fe:a9:fe00::", false, false, "local-use NAT64 (/48) form of 169.254.169.254"},
		{"2002:a9fe:a9fe::1", false, false, "6to4 form of 169.254.169.254"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", false, false, "Teredo form of 169.254.169.254"},
		{"::ffff:100.100.100.200", false, false, "cloud metadata endpoint " + never},
		{"::ffff:169.254.1.1", false, false, "which is link-local " + never},
		{"::ffff:0.0.0.0", false, false, "which is unspecified " + never},
		{"::ffff:224.0.0.1", false, false, "which is multicast " + never},
		{"::ffff:255.255.255.255", false, false, "which is broadcast " + never},
		{"2001:0:4136:e378:8000:63bf:ffff:ffff", false, false, "Teredo form of 0.0.0.0"},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		got := Check(a, false)
		if got.Allow != tt.allow || !strings.Contains(got.Reason, tt.reason) {
			t.Errorf("Check(%s, false) = %+v, want Allow %v with reason containing %q", tt.addr, got, tt.allow, tt.reason)
		}
		got = Check(a, true)
		if got.Allow != tt.allowPrivate {
			t.Errorf("Check(%s, true) = %+v, want Allow %v", tt.addr, got, tt.allowPrivate)
		}
		if !got.Allow && tt.allow {
			t.Errorf("Check(%s): allowPrivate turned an allow into %+v", tt.addr, got)
		}
		if got.Reason == "" {
			t.Errorf("Check(%s, true) has no reason", tt.addr)
		}
	}
	if got := Check(netip.Addr{}, true); got.Allow || got.Reason != "invalid address" {
		t.Errorf("Check(zero Addr, true) = %+v, want denied as invalid", got)
	}
}

// TestCheckCodes checks the code of each kind of refusal, which events
// and tests rely on rather than the reason's words.
func TestCheckCodes(t *testing.T) {
	tests := []struct {
		addr string
		code string // without allowPrivate
	}{
		{"8.8.8.8", ""},
		{"10.0.0.5", result.EgressPrivate},
		{"127.0.0.1", result.EgressPrivate},
		{"100.64.0.1", result.EgressPrivate},
		{"192.0.2.1", result.EgressPrivate},
		{"::ffff:8.8.8.8", result.EgressPrivate},
		{"64:ff9b:1::808:808", result.EgressPrivate},
		{"169.254.169.254", result.EgressMetadata},
		{"fd00:ec2::254", result.EgressMetadata},
		{"::ffff:169.254.169.254", result.EgressMetadata},
		{"64:ff9b:1::a9fe:a9fe", result.EgressMetadata},
		{"169.254.0.1", result.EgressLinkLocal},
		{"fe80::1", result.EgressLinkLocal},
		{"::ffff:169.254.1.1", result.EgressLinkLocal},
		{"0.0.0.0", result.EgressNotUnicast},
		{"224.0.0.1", result.EgressNotUnicast},
		{"255.255.255.255", result.EgressNotUnicast},
		{"::ffff:224.0.0.1", result.EgressNotUnicast},
		{"fe80::1%eth0", result.EgressInvalidHost},
	}
	for _, tt := range tests {
		if got := Check(netip.MustParseAddr(tt.addr), false); got.Code != tt.code || got.Allow != (tt.code == "") {
			t.Errorf("Check(%s, false) = %+v, want code %q", tt.addr, got, tt.code)
		}
	}
	if got := Check(netip.Addr{}, true); got.Code != result.EgressInvalidHost {
		t.Errorf("Check(zero Addr, true) = %+v, want code %q", got, result.EgressInvalidHost)
	}
	prefixes := []struct {
		prefix string
		code   string
	}{
		{"8.8.8.0/24", ""},
		{"10.0.0.0/8", result.EgressPrivate},
		{"128.0.0.0/1", result.EgressLinkLocal},
		{"100.64.0.0/10", result.EgressMetadata},
		{"224.0.0.0/4", result.EgressNotUnicast},
		{"::ffff:0:0/96", result.EgressMetadata},
	}
	for _, tt := range prefixes {
		if got := CheckPrefix(netip.MustParsePrefix(tt.prefix), false); got.Code != tt.code {
			t.Errorf("CheckPrefix(%s, false) = %+v, want code %q", tt.prefix, got, tt.code)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	tests := []struct {
		prefix              string
		allow, allowPrivate bool
		reason              string // substring of the reason without allowPrivate
	}{
		{"8.8.8.0/24", true, true, "prefix 8.8.8.0/24 is public"},
		{"2606:4700::/32", true, true, "is public"},
		{"203.0.113.5/32", false, true, "address 203.0.113.5 is reserved"},
		{"8.8.8.8/32", true, true, "address 8.8.8.8 is public"},
		{"10.0.0.0/8", false, true, "prefix 10.0.0.0/8 overlaps private range 10.0.0.0/8"},
		{"10.1.2.3/8", false, true, "prefix 10.0.0.0/8 overlaps private range"},
		{"8.0.0.0/6", false, true, "overlaps private range 10.0.0.0/8"},
		{"172.0.0.0/8", false, true, "overlaps private range 172.16.0.0/12"},
		{"100.64.0.0/16", false, true, "overlaps cgnat range 100.64.0.0/10"},
		{"203.0.113.0/24", false, true, "overlaps reserved range 203.0.113.0/24"},
		{"127.0.0.0/8", false, true, "overlaps loopback range"},
		{"fd12:3456::/32", false, true, "overlaps private range fc00::/7"},
		{"fec0::/10", false, true, "overlaps private range fec0::/10"},
		{"2001:db8::/32", false, true, "overlaps reserved range"},
		{"4000::/16", false, true, "overlaps reserved range 4000::/2"},
		{"::ffff:8.8.8.0/120", false, true, "overlaps embedded range ::ffff:0.0.0.0/96"},
		{"64:ff9b::808:800/120", false, true, "overlaps embedded range"},
		{"64:ff9b:1::808:800/120", false, true, "overlaps embedded range"},
		{"2002:808:800::/40", false, true, "overlaps embedded range"},
		{"2001:0:4136:e378:8000:63bf:3fff:fd00/120", false, true, "overlaps embedded range"},

		{"0.0.0.0/0", false, false, "(never allowed)"},
		{"128.0.0.0/1", false, false, "prefix 128.0.0.0/1 overlaps link-local range 169.254.0.0/16 (never allowed)"},
		{"169.254.0.0/16", false, false, "overlaps link-local range"},
		{"169.254.169.0/24", false, false, "overlaps link-local range"},
		{"169.254.169.254/32", false, false, "cloud metadata endpoint"},
		{"100.64.0.0/10", false, false, "prefix 100.64.0.0/10 contains a cloud metadata endpoint 100.100.100.200 (never allowed)"},
		{"168.63.129.0/24", false, false, "contains a cloud metadata endpoint 168.63.129.16"},
		{"192.0.0.0/24", false, false, "contains a cloud metadata endpoint 192.0.0.192"},
		{"0.0.0.0/8", false, false, "overlaps unspecified range"},
		{"224.0.0.0/4", false, false, "overlaps multicast range"},
		{"240.0.0.0/4", false, false, "contains broadcast 255.255.255.255"},
		{"::/0", false, false, "(never allowed)"},
		{"::/127", false, false, "(never allowed)"},
		{"fe80::/64", false, false, "overlaps link-local range fe80::/10"},
		{"fc00::/7", false, false, "contains a cloud metadata endpoint fd00:ec2::254"},
		{"fd00:ec2::/64", false, false, "contains a cloud metadata endpoint fd00:ec2::254"},
		{"ff00::/8", false, false, "overlaps multicast range"},
		{"::ffff:0:0/96", false, false, "contains IPv4-mapped forms of 169.254.169.254, which is a cloud metadata endpoint (never allowed)"},
		{"::ffff:169.254.0.0/112", false, false, "IPv4-mapped forms of 169.254.169.254"},
		{"::ffff:169.254.1.0/120", false, false, "IPv4-mapped forms of 169.254.1.0/24, which is link-local"},
		{"::ffff:0:0:0/96", false, false, "IPv4-translated forms"},
		{"::/96", false, false, "(never allowed)"},
		{"64:ff9b::/96", false, false, "NAT64 forms of 169.254.169.254"},
		{"64:ff9b::a9fe:a900/120", false, false, "NAT64 forms of 169.254.169.254"},
		{"64:ff9b:1::/48", false, false, "local-use NAT64"},
		{"64:ff9b:1::/96", false, false, "local-use NAT64 (/96) forms of 169.254.169.254"},
		{"2002::/16", false, false, "6to4 forms of 169.254.169.254"},
		{"2002:a9fe::/32", false, false, "6to4 forms of 169.254.169.254"},
		{"2001::/32", false, false, "Teredo forms"},
		{"2001:0:4136:e378::/64", false, false, "Teredo forms"},
		{"2001:0:4136:e378:8000:63bf:5601:5600/120", false, false, "Teredo forms of 169.254.169.254"},
		{"2000::/3", false, false, "(never allowed)"},
	}
	for _, tt := range tests {
		p := netip.MustParsePrefix(tt.prefix)
		got := CheckPrefix(p, false)
		if got.Allow != tt.allow || !strings.Contains(got.Reason, tt.reason) {
			t.Errorf("CheckPrefix(%s, false) = %+v, want Allow %v with reason containing %q", tt.prefix, got, tt.allow, tt.reason)
		}
		if got := CheckPrefix(p, true); got.Allow != tt.allowPrivate {
			t.Errorf("CheckPrefix(%s, true) = %+v, want Allow %v", tt.prefix, got, tt.allowPrivate)
		}
	}
	if got := CheckPrefix(netip.Prefix{}, true); got.Allow {
		t.Errorf("CheckPrefix(zero Prefix, true) = %+v, want denied", got)
	}
}

// TestCheckPrefixAgreesWithCheck checks, for small prefixes around every
// range edge, that CheckPrefix never allows a prefix holding an address
// Check refuses.
func TestCheckPrefixAgreesWithCheck(t *testing.T) {
	var prefixes []netip.Prefix
	add := func(a netip.Addr) {
		bits := 32 - 4
		if a.Is6() {
			bits = 128 - 4
		}
		for _, b := range []netip.Addr{a, a.Prev(), a.Next()} {
			if b.IsValid() {
				p, _ := b.Prefix(bits)
				prefixes = append(prefixes, p)
			}
		}
	}
	for _, r := range append(append([]classRange{}, v4Ranges...), v6Ranges...) {
		add(r.p.Addr())
		add(lastAddr(r.p))
	}
	for _, l := range layouts {
		for _, v := range []string{"169.254.169.254", "8.8.8.8", "0.0.0.0", "10.0.0.1"} {
			// Put the IPv4 address into every layout, so the prefixes
			// around it are embedded forms.
			b := l.within.Addr().As16()
			v4b := netip.MustParseAddr(v).As4()
			x := uint32(v4b[0])<<24 | uint32(v4b[1])<<16 | uint32(v4b[2])<<8 | uint32(v4b[3])
			x ^= l.xor
			i := 0
			for _, s := range l.segs {
				for j := s.start; j < s.start+s.n; j++ {
					if x>>(31-i)&1 == 1 {
						b[j/8] |= 1 << (7 - j%8)
					}
					i++
				}
			}
			add(netip.AddrFrom16(b))
		}
	}
	for _, p := range prefixes {
		for _, allowPrivate := range []bool{false, true} {
			if !CheckPrefix(p, allowPrivate).Allow {
				continue
			}
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				if d := Check(a, allowPrivate); !d.Allow {
					t.Errorf("CheckPrefix(%s, %v) allows, but Check(%s) = %+v", p, allowPrivate, a, d)
					break
				}
			}
		}
	}
}
