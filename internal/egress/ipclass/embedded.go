package ipclass

import "net/netip"

// segment is a run of address bits, numbered from 0 at the most significant
// bit of the 128-bit IPv6 address.
type segment struct{ start, n int }

// layout is one way an IPv6 range carries an IPv4 address.
type layout struct {
	within netip.Prefix
	// segs hold the IPv4 bits, most significant first, in increasing
	// address-bit order. RFC 6052 splits the address around bits 64-71.
	segs []segment
	// xor is applied to the extracted bits (Teredo stores the client
	// address inverted).
	xor uint32
	// form names the layout in reasons: "the <form> form of 10.0.0.1".
	form string
	// ambiguous marks the local-use NAT64 prefix 64:ff9b:1::/48: where the
	// IPv4 address sits depends on the prefix length the network operator
	// chose (RFC 6052 section 2.2), so every possible position is listed
	// and EmbeddedIPv4 reports none of them.
	ambiguous bool
}

// neverVia reports whether an address carrying an IPv4 address of class c
// in layout l is never allowed. For the ambiguous local-use NAT64 layouts
// only the classes that lead to cloud credentials count: the positions an
// operator did not choose hold zero padding and host bits, which read as
// 0.0.x.x and the like, and refusing those would refuse every local-use
// NAT64 address. The address still needs private: true as Embedded.
func (l *layout) neverVia(c Class) bool {
	if l.ambiguous {
		return c == Metadata || c == LinkLocal
	}
	return c.never()
}

var (
	low32   = []segment{{96, 32}}
	layouts = []layout{
		{within: netip.MustParsePrefix("::ffff:0:0/96"), segs: low32, form: "IPv4-mapped"},
		{within: netip.MustParsePrefix("::ffff:0:0:0/96"), segs: low32, form: "IPv4-translated"},
		{within: netip.MustParsePrefix("::/96"), segs: low32, form: "IPv4-compatible"},
		{within: netip.MustParsePrefix("64:ff9b::/96"), segs: low32, form: "NAT64"},
		{within: netip.MustParsePrefix("64:ff9b:1::/48"), segs: []segment{{48, 16}, {72, 16}}, form: "local-use NAT64 (/48)", ambiguous: true},
		{within: netip.MustParsePrefix("64:ff9b:1::/48"), segs: []segment{{56, 8}, {72, 24}}, form: "local-use NAT64 (/56)", ambiguous: true},
		{within: netip.MustParsePrefix("64:ff9b:1::/48"), segs: []segment{{72, 32}}, form: "local-use NAT64 (/64)", ambiguous: true},
		{within: netip.MustParsePrefix("64:ff9b:1::/48"), segs: low32, form: "local-use NAT64 (/96)", ambiguous: true},
		{within: netip.MustParsePrefix("2002::/16"), segs: []segment{{16, 32}}, form: "6to4"},
		{within: netip.MustParsePrefix("2001::/32"), segs: low32, xor: 0xffffffff, form: "Teredo"},
	}
)

// bit returns bit i of b, counting from 0 at the most significant bit.
func bit(b *[16]byte, i int) uint32 {
	return uint32(b[i/8]>>(7-i%8)) & 1
}

// extract returns the first n IPv4 bits l carries in b, left-aligned in a
// 32-bit value, with l.xor applied to them.
func (l *layout) extract(b *[16]byte, n int) uint32 {
	var v uint32
	got := 0
	for _, s := range l.segs {
		for i := s.start; i < s.start+s.n && got < n; i++ {
			v = v<<1 | bit(b, i)
			got++
		}
	}
	v <<= 32 - got
	return v ^ (l.xor &^ (0xffffffff >> got))
}

// fixedBits returns how many leading IPv4 bits of l lie within the first
// bits address bits.
func (l *layout) fixedBits(bits int) int {
	k := 0
	for _, s := range l.segs {
		for i := s.start; i < s.start+s.n; i++ {
			if i >= bits {
				return k
			}
			k++
		}
	}
	return k
}

// v4Prefix returns the IPv4 addresses l carries in the IPv6 prefix p, which
// must overlap l.within: the IPv4 bits p fixes, as a prefix.
func (l *layout) v4Prefix(p netip.Prefix) netip.Prefix {
	b := p.Masked().Addr().As16()
	k := l.fixedBits(p.Bits())
	v := l.extract(&b, k)
	return netip.PrefixFrom(v4(v), k)
}

func v4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// embeddings calls yield with every IPv4 address a may carry, and the
// layout that carries it, until yield returns false. It yields nothing
// unless a is Embedded.
func embeddings(a netip.Addr, yield func(netip.Addr, *layout) bool) {
	a = a.WithZone("")
	if Classify(a) != Embedded {
		return
	}
	b := a.As16()
	for i := range layouts {
		l := &layouts[i]
		if l.within.Contains(a) && !yield(v4(l.extract(&b, 32)), l) {
			return
		}
	}
}

// EmbeddedIPv4 returns the IPv4 address an Embedded address carries:
// the low 32 bits of an IPv4-mapped, IPv4-translated, IPv4-compatible or
// NAT64 (64:ff9b::/96) address, bits 16-47 of a 6to4 address, and the
// Teredo client address (the low 32 bits, inverted). ok is false for every
// other address, and for the local-use NAT64 prefix 64:ff9b:1::/48, where
// the position of the IPv4 address depends on the operator's prefix length
// (Check considers every possible position there).
func EmbeddedIPv4(a netip.Addr) (ip netip.Addr, ok bool) {
	embeddings(a, func(e netip.Addr, l *layout) bool {
		if !l.ambiguous {
			ip, ok = e, true
		}
		return false
	})
	return ip, ok
}
