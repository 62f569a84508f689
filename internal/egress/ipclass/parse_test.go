package ipclass

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHostAddresses(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		// The metadata endpoint in every inet_aton spelling.
		{"169.254.169.254", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"0xA9FEA9FE", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0XA9FEA9FE", "169.254.169.254"},
		{"0x00000000a9fea9fe", "169.254.169.254"},
		{"025177524776", "169.254.169.254"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"0xA9.0XFE.0251.254", "169.254.169.254"},
		{"169.254.43518", "169.254.169.254"},
		{"169.0xfe.0xa9fe", "169.254.169.254"},
		{"169.16689662", "169.254.169.254"},
		{"0xa9.0xfea9fe", "169.254.169.254"},
		{"169.254.169.254.", "169.254.169.254"},
		// Loopback and friends.
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"00", "0.0.0.0"},
		{"0x0", "0.0.0.0"},
		{"0.0", "0.0.0.0"},
		{"0.", "0.0.0.0"},
		// Octal in a dotted quad, as inet_aton reads it.
		{"010.0.0.1", "8.0.0.1"},
		{"0127.0.0.1", "87.0.0.1"},
		{"1.2.3.04", "1.2.3.4"},
		// Part widths: a = 32 bits, a.b = 8+24, a.b.c = 8+8+16.
		{"1.2.3", "1.2.0.3"},
		{"1.0x10000", "1.1.0.0"},
		{"1.16777215", "1.255.255.255"},
		{"1.2.65535", "1.2.255.255"},
		{"255.255.65535", "255.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"0xffffffff", "255.255.255.255"},
		{"037777777777", "255.255.255.255"},
		{"0000000000000000000000000000000000000001", "0.0.0.1"},
		// IPv6, bracketed or not, never unmapped.
		{"::1", "::1"},
		{"[::1]", "::1"},
		{"[::]", "::"},
		{"FE80::1", "fe80::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"::ffff:169.254.169.254", "::ffff:169.254.169.254"},
		{"[::ffff:169.254.169.254]", "::ffff:169.254.169.254"},
		{"[::ffff:a9fe:a9fe]", "::ffff:169.254.169.254"},
		{"[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"},
		{"[2002:a9fe:a9fe::1]", "2002:a9fe:a9fe::1"},
		{"[2001:0:4136:e378:8000:63bf:5601:5601]", "2001:0:4136:e378:8000:63bf:5601:5601"},
	}
	for _, tt := range tests {
		got, ok, err := ParseHost(tt.in)
		want := netip.MustParseAddr(tt.want)
		if err != nil || !ok || got != want {
			t.Errorf("ParseHost(%q) = %v, %v, %v; want %v, true, nil", tt.in, got, ok, err, want)
		}
	}
}

func TestParseHostNames(t *testing.T) {
	for _, in := range []string{
		"example.com",
		"EXAMPLE.COM.",
		"0day.example",
		"abc",
		"deadbeef", // hex digits without 0x are a name
		"1e100.net",
		"localhost",
		"0x1g",
		"0xg.1",
		"0x1.example",
		"1.2.3.4.com",
		"a.1.2.3",
		"1.2.3.a",
		"127.0.0.1x",
		"xn--bcher-kva.example",
		"bücher.example", // not ASCII: a name, for the caller to refuse
		"*.example.com",
		"1.2.3.4%eth0", // no ':' so not IPv6; invalid as a name, which callers check
		"-",
		"_dmarc.example.com",
	} {
		got, ok, err := ParseHost(in)
		if ok || err != nil || got.IsValid() {
			t.Errorf("ParseHost(%q) = %v, %v, %v; want a host name (invalid Addr, false, nil)", in, got, ok, err)
		}
	}
}

func TestParseHostErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // substring of the error
	}{
		{"", "empty host"},
		{".", "empty"},
		{"..", "empty part"},
		{"1.2.3.4.5", "5 parts"},
		{"1.2.3.4.5.", "5 parts"},
		{"256.1.1.1", `part "256" is more than 255`},
		{"1.256.1.1", "more than 255"},
		{"1.2.256.1", "more than 255"},
		{"1.2.3.256", "more than 255"},
		{"1.2.65536", "more than 65535"},
		{"1.16777216", "more than 16777215"},
		{"0x100.1", "more than 255"},
		{"4294967296", "too large"},
		{"0x100000000", "too large"},
		{"040000000000", "too large"},
		{"99999999999999999999999999999", "too large"},
		{"0x", "no hex digits"},
		{"0X", "no hex digits"},
		{"0x.1", "no hex digits"},
		{"1.0x", "no hex digits"},
		{"08.1.1.1", "not a base-8 digit"},
		{"09", "not a base-8 digit"},
		{"1.2.3.08", "not a base-8 digit"},
		{"1..2", "empty part"},
		{".1", "empty part"},
		{"1.2.3.4..", "5 parts"},
		{"1.2.3..", "empty part"},
		{"[1.2.3.4]", "not a valid IPv6 address"},
		{"[::1", "without a closing"},
		{"[]", "not a valid IPv6 address"},
		{"[::1]:443", "without a closing"},
		{"[fe80::1%25eth0]", "zone"},
		{"[fe80::1%eth0]", "zone"},
		{"fe80::1%eth0", "zone"},
		{"::1:", "not a valid IPv6 address"},
		{":::", "not a valid IPv6 address"},
		{"1.2.3.4:80", "not a valid IPv6 address"},
		{"example.com:443", "not a valid IPv6 address"},
		{" 1.2.3.4", "white space"},
		{"127.0.0.1 foo", "white space"},
		{"127.0.0.1\n", "white space"},
		{"a\tb", "white space"},
		{"\x00", "control"},
		{"1.2.3.4\x7f", "control"},
	}
	for _, tt := range tests {
		got, ok, err := ParseHost(tt.in)
		if err == nil || ok || got.IsValid() {
			t.Errorf("ParseHost(%q) = %v, %v, %v; want an error", tt.in, got, ok, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseHost(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestParseHostLongInputErrorIsShort(t *testing.T) {
	in := strings.Repeat("1", 100000)
	_, _, err := ParseHost(in)
	if err == nil {
		t.Fatalf("ParseHost(100000 digits) succeeded, want an error")
	}
	if len(err.Error()) > 2*maxQuote+200 {
		t.Errorf("ParseHost(100000 digits) error is %d bytes long, want it bounded", len(err.Error()))
	}
}
