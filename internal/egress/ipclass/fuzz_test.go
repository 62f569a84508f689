package ipclass

import (
	"net/netip"
	"testing"
)

// hostSeeds are interesting inputs for FuzzParseHost.
var hostSeeds = []string{
	"", ".", "..", "0", "0x", "0X1", "00", "08", "1.2.3.4", "1.2.3.4.", "1.2.3.4.5",
	"127.1", "0x7f.1", "017700000001", "2852039166", "0xA9FEA9FE",
	"0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe", "4294967295", "4294967296",
	"256.1.1.1", "1..2", "example.com", "0day.example", "deadbeef", "1e100.net",
	"::1", "[::1]", "[::1", "[]", "[1.2.3.4]", "fe80::1%eth0", "[fe80::1%25eth0]",
	"::ffff:169.254.169.254", "[64:ff9b::a9fe:a9fe]", "2002:a9fe:a9fe::1",
	"2001:0:4136:e378:8000:63bf:5601:5601", "1.2.3.4:80", "127.0.0.1 x", "\x00",
	"bücher.example", "0x00000000000000000000001",
}

func FuzzParseHost(f *testing.F) {
	for _, s := range hostSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok, err := ParseHost(s)
		if err != nil || !ok {
			if ok || a.IsValid() {
				t.Fatalf("ParseHost(%q) = %v, %v, %v; want the zero Addr and false", s, a, ok, err)
			}
		}
		// Whatever the standard library takes for an address without a
		// zone, ParseHost must take for the same address: a C dialer
		// would too.
		if std, stdErr := netip.ParseAddr(s); stdErr == nil && std.Zone() == "" {
			if !ok || a != std {
				t.Fatalf("ParseHost(%q) = %v, %v, %v; netip.ParseAddr gives %v", s, a, ok, err, std)
			}
		}
		if !ok {
			return
		}
		if a.Zone() != "" {
			t.Fatalf("ParseHost(%q) = %v, which has a zone", s, a)
		}
		text := a.String()
		back, ok2, err2 := ParseHost(text)
		if err2 != nil || !ok2 || back != a {
			t.Fatalf("ParseHost(%q) = %v, but ParseHost(%q) = %v, %v, %v", s, a, text, back, ok2, err2)
		}
		if a.Is6() {
			if b, ok3, err3 := ParseHost("[" + text + "]"); err3 != nil || !ok3 || b != a {
				t.Fatalf("ParseHost([%s]) = %v, %v, %v; want %v", text, b, ok3, err3, a)
			}
		}
		c := Classify(a)
		if c2 := Classify(back); c2 != c {
			t.Fatalf("Classify(%v) = %v, but after re-parsing %q it is %v", a, c, text, c2)
		}
		// The decision does not depend on the spelling either, and a
		// never-class address is refused even for a private destination.
		d := Check(a, true)
		if d2 := Check(back, true); d2 != d {
			t.Fatalf("Check(%v, true) = %+v, but after re-parsing it is %+v", a, d, d2)
		}
		if c.never() && d.Allow {
			t.Fatalf("Check(%v, true) = %+v for a %v address", a, d, c)
		}
		if e, ok := EmbeddedIPv4(a); ok && Classify(e).never() && d.Allow {
			t.Fatalf("Check(%v, true) = %+v, but it embeds %v (%v)", a, d, e, Classify(e))
		}
	})
}

// FuzzCheckPrefix checks that CheckPrefix never allows a prefix holding an
// address Check refuses. Prefixes are kept to at most 256 addresses so that
// every address can be checked.
func FuzzCheckPrefix(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/24", "169.254.169.0/24", "100.100.100.0/24", "8.8.8.0/24",
		"::ffff:169.254.169.0/120", "::ffff:8.8.8.0/120", "64:ff9b::a9fe:a900/120",
		"64:ff9b:1::a9fe:a900/120", "64:ff9b:1:a9fe:a9:fe00::/120",
		"2002:a9fe:a9fe::/120", "2001:0:4136:e378:8000:63bf:5601:5600/120",
		"fd00:ec2::200/120", "fe80::/120", "2606:4700::/120", "::/120",
	} {
		p := netip.MustParsePrefix(s)
		f.Add(p.Addr().AsSlice(), uint8(p.Addr().BitLen()-p.Bits()), false)
		f.Add(p.Addr().AsSlice(), uint8(p.Addr().BitLen()-p.Bits()), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, hostBits uint8, allowPrivate bool) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		p, err := a.Prefix(a.BitLen() - int(hostBits%9))
		if err != nil {
			t.Fatal(err)
		}
		d := CheckPrefix(p, allowPrivate)
		if d.Reason == "" {
			t.Fatalf("CheckPrefix(%s, %v) has no reason", p, allowPrivate)
		}
		if !d.Allow {
			return
		}
		for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
			if d2 := Check(a, allowPrivate); !d2.Allow {
				t.Fatalf("CheckPrefix(%s, %v) = %+v, but Check(%s) = %+v", p, allowPrivate, d, a, d2)
			}
		}
	})
}
