package ipclass

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		addr string
		want Class
	}{
		// 0.0.0.0/8
		{"0.0.0.0", Unspecified},
		{"0.255.255.255", Unspecified},
		{"1.0.0.0", Public},
		// 10.0.0.0/8
		{"9.255.255.255", Public},
		{"10.0.0.0", Private},
		{"10.255.255.255", Private},
		{"11.0.0.0", Public},
		// 100.64.0.0/10 and Alibaba's metadata address inside it
		{"100.63.255.255", Public},
		{"100.64.0.0", CGNAT},
		{"100.127.255.255", CGNAT},
		{"100.128.0.0", Public},
		{"100.100.100.199", CGNAT},
		{"100.100.100.200", Metadata},
		{"100.100.100.201", CGNAT},
		// 127.0.0.0/8
		{"126.255.255.255", Public},
		{"127.0.0.0", Loopback},
		{"127.0.0.1", Loopback},
		{"127.255.255.255", Loopback},
		{"128.0.0.0", Public},
		// 169.254.0.0/16 and the metadata addresses inside it
		{"169.253.255.255", Public},
		{"169.254.0.0", LinkLocal},
		{"169.254.255.255", LinkLocal},
		{"169.255.0.0", Public},
		{"169.254.169.253", LinkLocal},
		{"169.254.169.254", Metadata},
		{"169.254.169.255", LinkLocal},
		{"169.254.170.1", LinkLocal},
		{"169.254.170.2", Metadata},
		{"169.254.170.3", LinkLocal},
		{"169.254.170.22", LinkLocal},
		{"169.254.170.23", Metadata},
		{"169.254.170.24", LinkLocal},
		// 172.16.0.0/12
		{"172.15.255.255", Public},
		{"172.16.0.0", Private},
		{"172.31.255.255", Private},
		{"172.32.0.0", Public},
		// 192.0.0.0/24, Oracle's legacy metadata address, 192.0.2.0/24
		{"191.255.255.255", Public},
		{"192.0.0.0", Reserved},
		{"192.0.0.191", Reserved},
		{"192.0.0.192", Metadata},
		{"192.0.0.193", Reserved},
		{"192.0.0.255", Reserved},
		{"192.0.1.0", Public},
		{"192.0.1.255", Public},
		{"192.0.2.0", Reserved},
		{"192.0.2.255", Reserved},
		{"192.0.3.0", Public},
		// 192.168.0.0/16
		{"192.167.255.255", Public},
		{"192.168.0.0", Private},
		{"192.168.255.255", Private},
		{"192.169.0.0", Public},
		// 198.18.0.0/15
		{"198.17.255.255", Public},
		{"198.18.0.0", Reserved},
		{"198.19.255.255", Reserved},
		{"198.20.0.0", Public},
		// 198.51.100.0/24
		{"198.51.99.255", Public},
		{"198.51.100.0", Reserved},
		{"198.51.100.255", Reserved},
		{"198.51.101.0", Public},
		// 203.0.113.0/24
		{"203.0.112.255", Public},
		{"203.0.113.0", Reserved},
		{"203.0.113.255", Reserved},
		{"203.0.114.0", Public},
		// 224.0.0.0/4, 240.0.0.0/4, broadcast
		{"223.255.255.255", Public},
		{"224.0.0.0", Multicast},
		{"239.255.255.255", Multicast},
		{"240.0.0.0", Reserved},
		{"255.255.255.254", Reserved},
		{"255.255.255.255", Broadcast},
		// Azure WireServer
		{"168.63.129.15", Public},
		{"168.63.129.16", Metadata},
		{"168.63.129.17", Public},
		{"8.8.8.8", Public},
		{"1.1.1.1", Public},

		// IPv6 unspecified, loopback, IPv4-compatible ::/96
		{"::", Unspecified},
		{"::1", Loopback},
		{"::2", Embedded},
		{"::a9fe:a9fe", Embedded},
		{"::ffff:ffff", Embedded},
		{"::1:0:0", Reserved},
		// IPv4-mapped ::ffff:0:0/96 is Embedded, not its IPv4 class.
		{"::fffe:ffff:ffff", Reserved},
		{"::ffff:0.0.0.0", Embedded},
		{"::ffff:10.0.0.1", Embedded},
		{"::ffff:127.0.0.1", Embedded},
		{"::ffff:169.254.169.254", Embedded},
		{"::ffff:255.255.255.255", Embedded},
		{"::1:0:0:0", Reserved},
		// IPv4-translated ::ffff:0:0:0/96
		{"::ffff:0:0:0", Embedded},
		{"::ffff:0:ffff:ffff", Embedded},
		{"::ffff:1:0:0", Reserved},
		// NAT64
		{"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"64:ff9b::", Embedded},
		{"64:ff9b::a9fe:a9fe", Embedded},
		{"64:ff9b::ffff:ffff", Embedded},
		{"64:ff9b::1:0:0", Reserved},
		{"64:ff9b:0:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"64:ff9b:1::", Embedded},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Embedded},
		{"64:ff9b:2::", Reserved},
		// discard prefix
		{"100::", Reserved},
		{"100::ffff:ffff:ffff:ffff", Reserved},
		// 2000::/3 and its holes
		{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"2000::", Public},
		{"2001::", Embedded},
		{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", Embedded},
		{"2001:1::", Public},
		{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Public},
		{"2001:db8::", Reserved},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"2001:db9::", Public},
		{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public},
		{"2002::", Embedded},
		{"2002:a9fe:a9fe::1", Embedded},
		{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Embedded},
		{"2003::", Public},
		{"2606:4700:4700::1111", Public},
		{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public},
		{"3fff::", Reserved},
		{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"3fff:1000::", Public},
		{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public},
		{"4000::", Reserved},
		{"bfff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		// fc00::/7 and AWS's IPv6 metadata addresses inside it
		{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		{"fc00::", Private},
		{"fd00:ec2::22", Private},
		{"fd00:ec2::23", Metadata},
		{"fd00:ec2::24", Private},
		{"fd00:ec2::253", Private},
		{"fd00:ec2::254", Metadata},
		{"fd00:ec2::255", Private},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private},
		{"fe00::", Reserved},
		{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
		// fe80::/10, fec0::/10, ff00::/8
		{"fe80::", LinkLocal},
		{"fe80::1", LinkLocal},
		{"fe80::1%eth0", LinkLocal},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal},
		{"fec0::", Private},
		{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private},
		{"ff00::", Multicast},
		{"ff02::1", Multicast},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if got := Classify(a); got != tt.want {
			t.Errorf("Classify(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if got := Classify(netip.Addr{}); got != Unspecified {
		t.Errorf("Classify(zero Addr) = %v, want %v", got, Unspecified)
	}
}

func TestClassString(t *testing.T) {
	tests := []struct {
		c    Class
		want string
	}{
		{Public, "public"},
		{Loopback, "loopback"},
		{Private, "private"},
		{CGNAT, "cgnat"},
		{LinkLocal, "link-local"},
		{Metadata, "metadata"},
		{Multicast, "multicast"},
		{Broadcast, "broadcast"},
		{Unspecified, "unspecified"},
		{Reserved, "reserved"},
		{Embedded, "embedded"},
		{Embedded + 1, "class(11)"},
		{-1, "class(-1)"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("Class(%d).String() = %q, want %q", int(tt.c), got, tt.want)
		}
	}
}

func TestEmbeddedIPv4(t *testing.T) {
	tests := []struct {
		addr string
		want string // "" for ok=false
	}{
		{"::ffff:169.254.169.254", "169.254.169.254"},
		{"::ffff:a9fe:a9fe", "169.254.169.254"},
		{"::ffff:0.0.0.0", "0.0.0.0"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"::ffff:0:a9fe:a9fe", "169.254.169.254"},
		{"::a9fe:a9fe", "169.254.169.254"},
		{"::2", "0.0.0.2"},
		{"::", ""},
		{"::1", ""},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{"64:ff9b::169.254.169.254", "169.254.169.254"},
		{"64:ff9b::808:808", "8.8.8.8"},
		{"64:ff9b:1::a9fe:a9fe", ""}, // layout depends on the operator's prefix length
		{"2002:a9fe:a9fe::1", "169.254.169.254"},
		{"2002:a9fe:a9fe:ffff:ffff:ffff:ffff:ffff", "169.254.169.254"},
		{"2002:c000:22d::", "192.0.2.45"},
		// Teredo: the client address is the low 32 bits inverted.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", "169.254.169.254"},
		{"2001:0:4136:e378:8000:63bf:ffff:ffff", "0.0.0.0"},
		{"10.0.0.1", ""},
		{"169.254.169.254", ""},
		{"2606:4700::1", ""},
		{"fe80::1", ""},
		{"fd00:ec2::254", ""},
		{"2001:db8::a9fe:a9fe", ""},
	}
	for _, tt := range tests {
		got, ok := EmbeddedIPv4(netip.MustParseAddr(tt.addr))
		if tt.want == "" {
			if ok {
				t.Errorf("EmbeddedIPv4(%s) = %v, true; want false", tt.addr, got)
			}
			continue
		}
		if want := netip.MustParseAddr(tt.want); !ok || got != want {
			t.Errorf("EmbeddedIPv4(%s) = %v, %v; want %v, true", tt.addr, got, ok, want)
		}
	}
	if got, ok := EmbeddedIPv4(netip.Addr{}); ok {
		t.Errorf("EmbeddedIPv4(zero Addr) = %v, true; want false", got)
	}
}

// TestEveryEmbeddedAddressHasAnIPv4 checks that the classification table and
// the layouts agree: an Embedded address always yields at least one IPv4
// address to judge, so Check can never skip the never-rules for one.
func TestEveryEmbeddedAddressHasAnIPv4(t *testing.T) {
	for _, r := range v6Ranges {
		if r.c != Embedded {
			continue
		}
		for _, a := range []netip.Addr{r.p.Addr(), lastAddr(r.p), r.p.Addr().Next().Next()} {
			if Classify(a) != Embedded {
				continue // :: and ::1 head ::/96
			}
			n := 0
			embeddings(a, func(netip.Addr, *layout) bool { n++; return true })
			if n == 0 {
				t.Errorf("Embedded address %s (in %s) has no layout", a, r.p)
			}
		}
	}
}

// lastAddr returns the last address in p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	b := a.AsSlice()
	for i := p.Bits(); i < a.BitLen(); i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}
