package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/egress/ipclass"
)

// destSeeds are interesting inputs for the fuzzers.
var destSeeds = []string{
	"", "*", "*.", "*.com", "*.example.com", "*.Example.COM.:443,8443", "a.*.com",
	"api.example.com", "api.example.com:", "api.example.com:0", "api.example.com:65535",
	"api.example.com:443,443,22", "API.EXAMPLE.COM.", "localhost:8080", "metadata.google.internal",
	"instance-data.us-east-1.compute.internal", "2852039166:443", "0x7f.1", "127.1:80",
	"8.8.8.8", "8.8.8.0/24:53", "10.1.2.3/8", "0.0.0.0/0", "128.0.0.0/1", "[::1]:443",
	"[2606:4700::/32]:443", "2606:4700::/32:443", "2606:4700::1", "[::ffff:8.8.8.8]",
	"[fe80::1%25eth0]", "[::1", "[1.2.3.4]", "1.2.3.4.5", "bücher.example", "xn--bcher-kva.example",
	"_dmarc.example.com", "-a.example", "a..b", "1e100.net", "deadbeef", "0x", "[]:1",
}

func FuzzParseDestination(f *testing.F) {
	for _, s := range destSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDestination(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || err.Error() == "" {
				t.Fatalf("ParseDestination(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		checkInvariants(t, s, d)
		text := d.String()
		back, err := ParseDestination(text)
		if err != nil || !back.Equal(d) {
			t.Fatalf("ParseDestination(%q) = %+v; ParseDestination(%q) = %+v, %v", s, d, text, back, err)
		}
		if again := back.String(); again != text {
			t.Fatalf("String() is not stable: %q, then %q", text, again)
		}
		// A destination allows a request for itself.
		p := New([]Destination{d})
		host := d.Name
		switch {
		case d.Prefix.IsValid():
			host = d.Prefix.Masked().Addr().String()
		case d.Wildcard:
			host = "x." + d.Name
		}
		if len(host) > 253 {
			return // "x." made the name too long
		}
		if got, dec := p.Match(host, d.Ports[0]); got == nil || !dec.Allow {
			t.Fatalf("a policy of %q denies %q port %d: %+v", text, host, d.Ports[0], dec)
		}
	})
}

// checkInvariants checks what Compile promises about every destination it
// returns, here with Private false.
func checkInvariants(t *testing.T, s string, d Destination) {
	t.Helper()
	if len(d.Ports) == 0 || !slices.IsSorted(d.Ports) || len(slices.Compact(slices.Clone(d.Ports))) != len(d.Ports) || d.Ports[0] == 0 {
		t.Fatalf("ParseDestination(%q) ports %v are not sorted, unique and non-zero", s, d.Ports)
	}
	if (d.Name != "") == d.Prefix.IsValid() {
		t.Fatalf("ParseDestination(%q) = %+v: want exactly one of a name and a prefix", s, d)
	}
	if d.Prefix.IsValid() {
		if dec := ipclass.CheckPrefix(d.Prefix, false); !dec.Allow {
			t.Fatalf("ParseDestination(%q) = %+v, but CheckPrefix says %q", s, d, dec.Reason)
		}
		if d.Prefix.Masked() != d.Prefix {
			t.Fatalf("ParseDestination(%q) prefix %v is not masked", s, d.Prefix)
		}
		return
	}
	if n, problem := normalizeName(d.Name); problem != "" || n != d.Name {
		t.Fatalf("ParseDestination(%q) name %q is not canonical: %q %s", s, d.Name, n, problem)
	}
	if d.Wildcard && !strings.Contains(d.Name, ".") {
		t.Fatalf("ParseDestination(%q) = wildcard over a top-level domain %q", s, d.Name)
	}
	if !d.Wildcard && isMetadataName(d.Name) {
		t.Fatalf("ParseDestination(%q) = metadata name %q", s, d.Name)
	}
	if _, isIP, err := ipclass.ParseHost(d.Name); isIP || err != nil {
		t.Fatalf("ParseDestination(%q) = name %q, which is numeric", s, d.Name)
	}
}

func FuzzMatch(f *testing.F) {
	for _, s := range append(destSeeds, "www.example.com", "x.google.internal", "203.0.113.5", "0xCB.0.0x71.5") {
		f.Add(s, uint16(443))
	}
	f.Fuzz(func(t *testing.T, host string, port uint16) {
		var dests []Destination
		for _, s := range testSpecs {
			d, err := Compile(s)
			if err != nil {
				t.Fatal(err)
			}
			dests = append(dests, d)
		}
		p := New(dests)
		d, dec := p.Match(host, port)
		if dec.Reason == "" {
			t.Fatalf("Match(%q, %d) gave no reason", host, port)
		}
		if !dec.Allow {
			if d != nil {
				t.Fatalf("Match(%q, %d) denied but returned %v", host, port, d)
			}
			return
		}
		if d == nil || !d.AllowsPort(port) {
			t.Fatalf("Match(%q, %d) allowed by %v", host, port, d)
		}
		a, isIP, err := ipclass.ParseHost(host)
		if err != nil {
			t.Fatalf("Match(%q, %d) allowed a host ParseHost refuses: %v", host, port, err)
		}
		if isIP {
			if !d.Prefix.Contains(a) || !ipclass.Check(a, d.Private).Allow {
				t.Fatalf("Match(%q, %d) allowed %v by %v", host, port, a, d)
			}
			return
		}
		name, problem := normalizeName(host)
		if problem != "" || isMetadataName(name) || !d.coversName(name) {
			t.Fatalf("Match(%q, %d) allowed name %q (%s) by %v", host, port, name, problem, d)
		}
		if l := p.Lookup(host); l == nil {
			t.Fatalf("Match(%q, %d) allowed, but Lookup finds nothing", host, port)
		}
	})
}
