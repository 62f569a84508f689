package e2bserver

import (
	"strconv"
	"strings"
	"testing"
)

// TestPortHost reads P-ID.DOMAIN, and nothing else.
func TestPortHost(t *testing.T) {
	for _, tc := range []struct {
		host   string
		port   int
		id     string
		ok     bool
		domain string
	}{
		{"8000-s_abc.sandbox.test", 8000, "s_abc", true, ""},
		{"8000-s_abc.sandbox.test:7401", 8000, "s_abc", true, ""},
		{"49983-s_abc.SANDBOX.test", 49983, "s_abc", true, ""},
		{"1-x.sandbox.test", 1, "x", true, ""},
		{"65535-x.sandbox.test", 65535, "x", true, ""},
		{"65536-x.sandbox.test", 0, "", false, ""},
		{"0-x.sandbox.test", 0, "", false, ""},
		{"08000-x.sandbox.test", 0, "", false, ""},
		{"-8000-x.sandbox.test", 0, "", false, ""},
		{"8000-.sandbox.test", 0, "", false, ""},
		{"8000.sandbox.test", 0, "", false, ""},
		{"x-8000.sandbox.test", 0, "", false, ""},
		{"a.8000-x.sandbox.test", 0, "", false, ""},
		{"8000-x.other.test", 0, "", false, ""},
		{"8000-xsandbox.test", 0, "", false, ""},
		{"sandbox.test", 0, "", false, ""},
		{"127.0.0.1:7401", 0, "", false, ""},
		{"8000-s_abc.sandbox.test", 0, "", false, "-"}, // no domain configured
	} {
		domain := "sandbox.test"
		if tc.domain == "-" {
			domain = ""
		}
		port, id, ok := portHost(tc.host, domain)
		if port != tc.port || id != tc.id || ok != tc.ok {
			t.Errorf("%q: %d %q %v, want %d %q %v", tc.host, port, id, ok, tc.port, tc.id, tc.ok)
		}
	}
}

// FuzzPortHost: whatever the host, a port read is 1 to 65535, and the
// host is that port, a hyphen and the id, just below the domain.
func FuzzPortHost(f *testing.F) {
	for _, s := range []string{"8000-s_abc.sandbox.test", "8000-s_abc.sandbox.test:1", "a.b.sandbox.test", "-.sandbox.test", "99999999999-x.sandbox.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := portHost(host, "sandbox.test")
		if !ok {
			return
		}
		if port < 1 || port > 65535 || id == "" || strings.Contains(id, ".") {
			t.Fatalf("%q: %d %q", host, port, id)
		}
		h := strings.ToLower(host)
		if i := strings.LastIndexByte(h, ':'); i > 0 && !strings.HasSuffix(h, "sandbox.test") {
			h = h[:i]
		}
		if h != strconv.Itoa(port)+"-"+id+".sandbox.test" {
			t.Fatalf("%q read as %d-%s", host, port, id)
		}
	})
}
