package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestCompileValid(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	// 253 bytes: three 63-byte labels, one 61-byte label, three dots.
	long253 := long63 + "." + long63 + "." + long63 + "." + strings.Repeat("b", 61)
	tests := []struct {
		spec    Spec
		want    Destination
		wantStr string
	}{
		{Spec{Host: "api.example.com"}, Destination{Name: "api.example.com", Ports: []uint16{443}}, "api.example.com:443"},
		{Spec{Host: "API.Example.COM."}, Destination{Name: "api.example.com", Ports: []uint16{443}}, "api.example.com:443"},
		{Spec{Host: "api.example.com:8443"}, Destination{Name: "api.example.com", Ports: []uint16{8443}}, "api.example.com:8443"},
		{Spec{Host: "api.example.com:8443,443,443"}, Destination{Name: "api.example.com", Ports: []uint16{443, 8443}}, "api.example.com:443,8443"},
		{Spec{Host: "api.example.com", Ports: []int{8443, 443, 8443}}, Destination{Name: "api.example.com", Ports: []uint16{443, 8443}}, "api.example.com:443,8443"},
		{Spec{Host: "api.example.com", Ports: []int{}}, Destination{Name: "api.example.com", Ports: []uint16{443}}, "api.example.com:443"},
		{Spec{Host: "api.example.com:1,65535"}, Destination{Name: "api.example.com", Ports: []uint16{1, 65535}}, "api.example.com:1,65535"},
		{Spec{Host: "*.example.com"}, Destination{Name: "example.com", Wildcard: true, Ports: []uint16{443}}, "*.example.com:443"},
		{Spec{Host: "*.Example.COM.:80"}, Destination{Name: "example.com", Wildcard: true, Ports: []uint16{80}}, "*.example.com:80"},
		{Spec{Host: "*.example.com", Ports: []int{8443, 443}}, Destination{Name: "example.com", Wildcard: true, Ports: []uint16{443, 8443}}, "*.example.com:443,8443"},
		{Spec{Host: "*.co.uk"}, Destination{Name: "co.uk", Wildcard: true, Ports: []uint16{443}}, "*.co.uk:443"},
		{Spec{Host: "localhost:8080", Private: true}, Destination{Name: "localhost", Ports: []uint16{8080}, Private: true}, "localhost:8080"},
		{Spec{Host: "_dmarc.example.com"}, Destination{Name: "_dmarc.example.com", Ports: []uint16{443}}, "_dmarc.example.com:443"},
		{Spec{Host: "xn--bcher-kva.example"}, Destination{Name: "xn--bcher-kva.example", Ports: []uint16{443}}, "xn--bcher-kva.example:443"},
		{Spec{Host: "a-b.example.com"}, Destination{Name: "a-b.example.com", Ports: []uint16{443}}, "a-b.example.com:443"},
		{Spec{Host: "1e100.net"}, Destination{Name: "1e100.net", Ports: []uint16{443}}, "1e100.net:443"},
		{Spec{Host: "deadbeef"}, Destination{Name: "deadbeef", Ports: []uint16{443}}, "deadbeef:443"},
		{Spec{Host: "1.2.3.4.nip.io"}, Destination{Name: "1.2.3.4.nip.io", Ports: []uint16{443}}, "1.2.3.4.nip.io:443"},
		{Spec{Host: "metadata.example.com"}, Destination{Name: "metadata.example.com", Ports: []uint16{443}}, "metadata.example.com:443"},
		{Spec{Host: long63 + ".example"}, Destination{Name: long63 + ".example", Ports: []uint16{443}}, long63 + ".example:443"},
		{Spec{Host: long253 + "."}, Destination{Name: long253, Ports: []uint16{443}}, long253 + ":443"},

		// IP destinations, in every spelling.
		{Spec{Host: "8.8.8.8"}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{443}}, "8.8.8.8:443"},
		{Spec{Host: "8.8.8.8:53"}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{53}}, "8.8.8.8:53"},
		{Spec{Host: "8.8.8.8/32:53"}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{53}}, "8.8.8.8:53"},
		{Spec{Host: "0x08080808:53"}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{53}}, "8.8.8.8:53"},
		{Spec{Host: "134744072"}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{443}}, "8.8.8.8:443"},
		{Spec{Host: "8.8.2056."}, Destination{Prefix: pfx("8.8.8.8/32"), Ports: []uint16{443}}, "8.8.8.8:443"},
		{Spec{Host: "[2606:4700::1111]:443"}, Destination{Prefix: pfx("2606:4700::1111/128"), Ports: []uint16{443}}, "[2606:4700::1111]:443"},
		{Spec{Host: "[2606:4700::1111]"}, Destination{Prefix: pfx("2606:4700::1111/128"), Ports: []uint16{443}}, "[2606:4700::1111]:443"},
		{Spec{Host: "2606:4700::1111"}, Destination{Prefix: pfx("2606:4700::1111/128"), Ports: []uint16{443}}, "[2606:4700::1111]:443"},
		{Spec{Host: "2606:4700::1111", Ports: []int{853}}, Destination{Prefix: pfx("2606:4700::1111/128"), Ports: []uint16{853}}, "[2606:4700::1111]:853"},
		{Spec{Host: "8.8.8.0/24:443"}, Destination{Prefix: pfx("8.8.8.0/24"), Ports: []uint16{443}}, "8.8.8.0/24:443"},
		{Spec{Host: "8.8.8.0/24"}, Destination{Prefix: pfx("8.8.8.0/24"), Ports: []uint16{443}}, "8.8.8.0/24:443"},
		{Spec{Host: "8.8.8.0/24:53,443"}, Destination{Prefix: pfx("8.8.8.0/24"), Ports: []uint16{53, 443}}, "8.8.8.0/24:53,443"},
		{Spec{Host: "[2606:4700::/32]:443"}, Destination{Prefix: pfx("2606:4700::/32"), Ports: []uint16{443}}, "[2606:4700::/32]:443"},
		{Spec{Host: "2606:4700::/32"}, Destination{Prefix: pfx("2606:4700::/32"), Ports: []uint16{443}}, "[2606:4700::/32]:443"},
		{Spec{Host: "2606:4700::/32:8443"}, Destination{Prefix: pfx("2606:4700::/32"), Ports: []uint16{8443}}, "[2606:4700::/32]:8443"},

		// Non-public ranges with private: true.
		{Spec{Host: "10.0.0.0/8", Private: true}, Destination{Prefix: pfx("10.0.0.0/8"), Ports: []uint16{443}, Private: true}, "10.0.0.0/8:443"},
		{Spec{Host: "203.0.113.0/24:443", Private: true}, Destination{Prefix: pfx("203.0.113.0/24"), Ports: []uint16{443}, Private: true}, "203.0.113.0/24:443"},
		{Spec{Host: "127.0.0.1:8080", Private: true}, Destination{Prefix: pfx("127.0.0.1/32"), Ports: []uint16{8080}, Private: true}, "127.0.0.1:8080"},
		{Spec{Host: "127.1:8080", Private: true}, Destination{Prefix: pfx("127.0.0.1/32"), Ports: []uint16{8080}, Private: true}, "127.0.0.1:8080"},
		{Spec{Host: "[::1]:8080", Private: true}, Destination{Prefix: pfx("::1/128"), Ports: []uint16{8080}, Private: true}, "[::1]:8080"},
		{Spec{Host: "[::ffff:10.0.0.1]", Private: true}, Destination{Prefix: pfx("::ffff:10.0.0.1/128"), Ports: []uint16{443}, Private: true}, "[::ffff:10.0.0.1]:443"},
		{Spec{Host: "[::ffff:8.8.8.0/120]", Private: true}, Destination{Prefix: pfx("::ffff:8.8.8.0/120"), Ports: []uint16{443}, Private: true}, "[::ffff:8.8.8.0/120]:443"},
		{Spec{Host: "100.64.0.0/16", Private: true}, Destination{Prefix: pfx("100.64.0.0/16"), Ports: []uint16{443}, Private: true}, "100.64.0.0/16:443"},
		{Spec{Host: "[fd12:3456::/32]:443", Private: true}, Destination{Prefix: pfx("fd12:3456::/32"), Ports: []uint16{443}, Private: true}, "[fd12:3456::/32]:443"},

		// Pinned addresses.
		{
			Spec{Host: "api.example.com", Addresses: []string{"93.184.215.14", "[2606:2800:21f::1]", "93.184.215.14", "0x5db8d70e"}},
			Destination{Name: "api.example.com", Ports: []uint16{443}, Addresses: addrs("93.184.215.14", "2606:2800:21f::1")},
			"api.example.com:443",
		},
		{
			Spec{Host: "db.corp.example:5432", Addresses: []string{"10.0.0.5", "fd00::5", "127.1"}, Private: true},
			Destination{Name: "db.corp.example", Ports: []uint16{5432}, Addresses: addrs("10.0.0.5", "fd00::5", "127.0.0.1"), Private: true},
			"db.corp.example:5432",
		},
	}
	for _, tt := range tests {
		got, err := Compile(tt.spec)
		if err != nil {
			t.Errorf("Compile(%+v) error: %v", tt.spec, err)
			continue
		}
		if !got.Equal(tt.want) {
			t.Errorf("Compile(%+v) = %+v, want %+v", tt.spec, got, tt.want)
		}
		if s := got.String(); s != tt.wantStr {
			t.Errorf("Compile(%+v).String() = %q, want %q", tt.spec, s, tt.wantStr)
		}
		// The canonical form compiles back to the same destination.
		back, err := Compile(Spec{Host: got.String(), Addresses: addrStrings(got.Addresses), Private: got.Private})
		if err != nil || !back.Equal(got) {
			t.Errorf("Compile(%q) = %+v, %v; want %+v", got.String(), back, err, got)
		}
	}
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func TestCompileInvalid(t *testing.T) {
	long64 := strings.Repeat("a", 64)
	long254 := strings.Repeat("a.", 126) + "bb"
	tests := []struct {
		spec Spec
		want string // substring of the error
	}{
		{Spec{}, "host is empty"},
		{Spec{Host: " example.com"}, "white space"},
		{Spec{Host: "exa mple.com"}, "white space"},
		{Spec{Host: "example.com\n"}, "white space or control characters"},
		{Spec{Host: strings.Repeat("a", 2000)}, "at most 1024"},

		// Ports.
		{Spec{Host: "example.com:"}, "has ':' but no port"},
		{Spec{Host: "example.com:0"}, `port "0" is not valid; expected a decimal number from 1 to 65535`},
		{Spec{Host: "example.com:65536"}, `port "65536" is not valid`},
		{Spec{Host: "example.com:0443"}, `port "0443" is not valid`},
		{Spec{Host: "example.com:+443"}, `port "+443" is not valid`},
		{Spec{Host: "example.com:443,"}, `port "" is not valid`},
		{Spec{Host: "example.com:44a"}, `port "44a" is not valid`},
		{Spec{Host: "example.com:https"}, `port "https" is not valid`},
		{Spec{Host: "example.com:443", Ports: []int{443}}, "give the port in host or in ports, not both"},
		{Spec{Host: "[::1]:443", Ports: []int{443}, Private: true}, "give the port in host or in ports, not both"},
		{Spec{Host: "example.com", Ports: []int{0}}, "port 0 is out of range; expected 1 to 65535"},
		{Spec{Host: "example.com", Ports: []int{65536}}, "port 65536 is out of range"},
		{Spec{Host: "example.com", Ports: []int{443, -1}}, "port -1 is out of range"},
		{Spec{Host: ":443"}, "host is empty before the port"},
		{Spec{Host: "example.com:443:80"}, "not a valid IPv6 address"},

		// Host names.
		{Spec{Host: "bücher.example"}, "is not ASCII; use its punycode (xn--) form"},
		{Spec{Host: "\u212aelvin.example"}, "punycode"},
		{Spec{Host: "a..example.com"}, "empty label"},
		{Spec{Host: "example.com.."}, "empty label"},
		{Spec{Host: ".example.com"}, "empty label"},
		{Spec{Host: "-example.com"}, `label "-example" starting or ending with '-'`},
		{Spec{Host: "example-.com"}, "starting or ending with '-'"},
		{Spec{Host: "exa!mple.com"}, "labels may hold only letters, digits, '-' and '_'"},
		{Spec{Host: "exa]mple.com"}, "labels may hold only"},
		{Spec{Host: "example.com/"}, "is not a valid CIDR"},
		{Spec{Host: long64 + ".example"}, "label of 64 bytes; at most 63"},
		{Spec{Host: long254}, "254 bytes long; at most 253"},

		// Wildcards.
		{Spec{Host: "*"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "*:443"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "*.com"}, "covers a whole top-level domain"},
		{Spec{Host: "*.com."}, "covers a whole top-level domain"},
		{Spec{Host: "*.internal"}, "covers a whole top-level domain"},
		{Spec{Host: "a.*.com"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "*example.com"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "*.*.example.com"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "**.example.com"}, "'*' is only allowed as a whole first label"},
		{Spec{Host: "*."}, "host name is empty"},
		{Spec{Host: "*.1.2.3.4"}, "over an IP address"},
		{Spec{Host: "*.256.1.1.1"}, "over an IP address"},
		{Spec{Host: "*.bücher.example"}, "punycode"},

		// Cloud metadata names, whatever Private says.
		{Spec{Host: "metadata.google.internal"}, `"metadata.google.internal" is a cloud metadata name (never allowed)`},
		{Spec{Host: "METADATA.Google.Internal.:80"}, `"metadata.google.internal" is a cloud metadata name`},
		{Spec{Host: "metadata.google.internal", Private: true}, "cloud metadata name"},
		{Spec{Host: "metadata"}, "cloud metadata name"},
		{Spec{Host: "metadata.goog"}, "cloud metadata name"},
		{Spec{Host: "instance-data"}, "cloud metadata name"},
		{Spec{Host: "instance-data.ec2.internal"}, "cloud metadata name"},
		{Spec{Host: "instance-data.us-east-1.compute.internal"}, "cloud metadata name"},
		{Spec{Host: "metadata.tencentyun.com"}, "cloud metadata name"},

		// Metadata and link-local addresses in any spelling, whatever
		// Private says.
		{Spec{Host: "2852039166:443"}, "address 169.254.169.254 is a cloud metadata endpoint (never allowed)"},
		{Spec{Host: "2852039166:443", Private: true}, "address 169.254.169.254 is a cloud metadata endpoint (never allowed)"},
		{Spec{Host: "0xA9FEA9FE", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "0251.0376.0251.0376:80", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "169.254.169.254", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "169.254.169.254/32", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "100.100.100.200", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "[::ffff:169.254.169.254]:443", Private: true}, "IPv4-mapped form of 169.254.169.254"},
		{Spec{Host: "[64:ff9b::a9fe:a9fe]", Private: true}, "NAT64 form of 169.254.169.254"},
		{Spec{Host: "[2002:a9fe:a9fe::1]", Private: true}, "6to4 form of 169.254.169.254"},
		{Spec{Host: "[fd00:ec2::254]", Private: true}, "cloud metadata endpoint"},
		{Spec{Host: "[fe80::1]", Private: true}, "link-local (never allowed)"},
		{Spec{Host: "[fe80::1%25eth0]", Private: true}, "zone"},
		{Spec{Host: "169.254.0.0/16", Private: true}, "overlaps link-local range 169.254.0.0/16 (never allowed)"},
		{Spec{Host: "0.0.0.0/0", Private: true}, "(never allowed)"},
		{Spec{Host: "128.0.0.0/1:443", Private: true}, "overlaps link-local range"},
		{Spec{Host: "::/0", Private: true}, "(never allowed)"},
		{Spec{Host: "[2000::/3]", Private: true}, "(never allowed)"},
		{Spec{Host: "[::ffff:0:0/96]", Private: true}, "IPv4-mapped forms of 169.254.169.254"},
		{Spec{Host: "[64:ff9b::/96]:443", Private: true}, "NAT64 forms"},
		{Spec{Host: "100.64.0.0/10", Private: true}, "contains a cloud metadata endpoint 100.100.100.200"},
		{Spec{Host: "[fc00::/7]", Private: true}, "contains a cloud metadata endpoint fd00:ec2::254"},
		{Spec{Host: "0.0.0.0:80", Private: true}, "unspecified (never allowed)"},
		{Spec{Host: "0:80", Private: true}, "unspecified (never allowed)"},
		{Spec{Host: "[::]", Private: true}, "unspecified (never allowed)"},
		{Spec{Host: "224.0.0.1", Private: true}, "multicast (never allowed)"},
		{Spec{Host: "255.255.255.255", Private: true}, "broadcast (never allowed)"},

		// Non-public ranges without private: true.
		{Spec{Host: "10.0.0.0/8"}, "overlaps private range 10.0.0.0/8; set private: true to allow it"},
		{Spec{Host: "127.0.0.1"}, "address 127.0.0.1 is loopback; set private: true to allow it"},
		{Spec{Host: "[::1]:8080"}, "address ::1 is loopback; set private: true"},
		{Spec{Host: "0x7f.1"}, "address 127.0.0.1 is loopback; set private: true"},
		{Spec{Host: "100.64.0.1"}, "set private: true"},
		{Spec{Host: "203.0.113.0/24:443"}, "overlaps reserved range 203.0.113.0/24; set private: true"},
		{Spec{Host: "[::ffff:8.8.8.8]"}, "IPv6 form of 8.8.8.8; set private: true"},

		// Malformed IP destinations.
		{Spec{Host: "10.1.2.3/8", Private: true}, "CIDR 10.1.2.3/8 has bits set after the prefix length; expected 10.0.0.0/8"},
		{Spec{Host: "10.0.0.0/33"}, `"10.0.0.0/33" is not a valid CIDR`},
		{Spec{Host: "010.0.0.0/8"}, "is not a valid CIDR"},
		{Spec{Host: "0x0a000000/8"}, "is not a valid CIDR"},
		{Spec{Host: "10.0.0.0/8:"}, "has ':' but no port"},
		{Spec{Host: "[10.0.0.0/8]"}, "is not a valid IPv6 CIDR"},
		{Spec{Host: "[1.2.3.4]"}, "brackets hold an IPv6 address"},
		{Spec{Host: "[::1]443"}, `has "443" after ']'; expected :port`},
		{Spec{Host: "[::1"}, "has '[' without ']'"},
		{Spec{Host: "[]:443"}, "not a valid IPv6 address"},
		{Spec{Host: "1.2.3.4.5:443"}, "looks like an IPv4 address but is not a valid one"},
		{Spec{Host: "256.1.1.1"}, `part "256" is more than 255`},
		{Spec{Host: "08.1.1.1"}, "not a base-8 digit"},
		{Spec{Host: "0x"}, "no hex digits"},
		{Spec{Host: "1..2"}, "empty part"},
		{Spec{Host: "4294967296"}, "too large"},

		// Pinned addresses.
		{Spec{Host: "8.8.8.8", Addresses: []string{"8.8.4.4"}}, "addresses only apply to host names"},
		{Spec{Host: "*.example.com", Addresses: []string{"8.8.8.8"}}, "addresses cannot be pinned for a wildcard"},
		{Spec{Host: "api.example.com", Addresses: []string{"api2.example.com"}}, `addresses: "api2.example.com" is not an IP address`},
		{Spec{Host: "api.example.com", Addresses: []string{""}}, "addresses: empty host"},
		{Spec{Host: "api.example.com", Addresses: []string{"127.0.0.1"}}, "addresses: address 127.0.0.1 is loopback; set private: true to allow it"},
		{Spec{Host: "api.example.com", Addresses: []string{"0x7f.1"}}, "address 127.0.0.1 is loopback; set private: true"},
		{Spec{Host: "api.example.com", Addresses: []string{"8.8.8.8", "10.0.0.1"}}, "address 10.0.0.1 is private; set private: true"},
		{Spec{Host: "api.example.com", Addresses: []string{"169.254.169.254"}, Private: true}, "addresses: address 169.254.169.254 is a cloud metadata endpoint (never allowed)"},
		{Spec{Host: "api.example.com", Addresses: []string{"::ffff:169.254.169.254"}, Private: true}, "cloud metadata endpoint (never allowed)"},
		{Spec{Host: "api.example.com", Addresses: []string{"0.0.0.0"}, Private: true}, "unspecified (never allowed)"},
		{Spec{Host: "api.example.com", Addresses: []string{"fe80::1%eth0"}, Private: true}, "zone"},
		{Spec{Host: "api.example.com", Addresses: []string{"256.1.1.1"}}, `addresses: host "256.1.1.1" looks like an IPv4 address`},
		{Spec{Host: "api.example.com", Addresses: []string{"8.8.8.0/24"}}, "not an IP address"},
	}
	for _, tt := range tests {
		got, err := Compile(tt.spec)
		if err == nil {
			t.Errorf("Compile(%+v) = %+v, want an error containing %q", tt.spec, got, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%+v) error = %q, want it to contain %q", tt.spec, err, tt.want)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Compile(%+v) error %v does not wrap ErrInvalid", tt.spec, err)
		}
		var se *SpecError
		if !errors.As(err, &se) || se.Host != tt.spec.Host {
			t.Errorf("Compile(%+v) error %#v is not a *SpecError for the host", tt.spec, err)
		}
		if len(err.Error()) > 1000 {
			t.Errorf("Compile(%+v) error is %d bytes long", tt.spec, len(err.Error()))
		}
		if !got.Equal(Destination{}) {
			t.Errorf("Compile(%+v) returned %+v with its error, want the zero Destination", tt.spec, got)
		}
	}
}

func TestParseDestination(t *testing.T) {
	got, err := ParseDestination("*.Example.com:8443,443")
	want := Destination{Name: "example.com", Wildcard: true, Ports: []uint16{443, 8443}}
	if err != nil || !got.Equal(want) {
		t.Errorf("ParseDestination = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseDestination("*.com"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseDestination(*.com) error = %v, want ErrInvalid", err)
	}
}

func TestAllowsPort(t *testing.T) {
	d, err := ParseDestination("example.com:443,8443")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		port uint16
		want bool
	}{
		{443, true},
		{8443, true},
		{0, false},
		{80, false},
		{65535, false},
	}
	for _, tt := range tests {
		if got := d.AllowsPort(tt.port); got != tt.want {
			t.Errorf("AllowsPort(%d) = %v, want %v", tt.port, got, tt.want)
		}
	}
}

func TestStringOfHandBuiltDestinations(t *testing.T) {
	tests := []struct {
		d    Destination
		want string
	}{
		{Destination{}, ""},
		{Destination{Name: "example.com"}, "example.com"},
		{Destination{Prefix: pfx("::/0"), Ports: []uint16{1}}, "[::/0]:1"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.d, got, tt.want)
		}
	}
}
