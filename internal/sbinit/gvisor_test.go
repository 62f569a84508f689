package sbinit

import (
	"strings"
	"testing"
)

func TestParseGVisorIDs(t *testing.T) {
	for _, tt := range []struct {
		in           string
		uid, gid, iu int
		ok           bool
	}{
		{FormatGVisorIDs(1000, 1000, 65535), 1000, 1000, 65535, true},
		{"0:0:65535", 0, 0, 65535, true},
		{"1000:1000", 0, 0, 0, false},
		{"1000:1000:1000", 0, 0, 0, false}, // init's uid would be the commands'
		{"1000:1000:0", 0, 0, 0, false},    // init as root
		{"1000:1000:70000", 0, 0, 0, false},
		{"-1:1000:65535", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		u, g, i, err := parseGVisorIDs(tt.in)
		if (err == nil) != tt.ok || tt.ok && (u != tt.uid || g != tt.gid || i != tt.iu) {
			t.Errorf("parseGVisorIDs(%q) = %d %d %d %v", tt.in, u, g, i, err)
		}
	}
}

func TestStatusCapBnd(t *testing.T) {
	const head = "Name:\tinit\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000080\n"
	for _, tt := range []struct {
		name, status string
		want         uint64
		ok           bool
	}{
		{"empty set", head + "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000080\n", 0, true},
		{"full set", head + "CapBnd:\t000001ffffffffff\n", 0x1ffffffffff, true},
		{"one capability", head + "CapBnd:\t0000000000000080\n", 0x80, true},
		{"last line without newline", head + "CapBnd:\t0000000000000001", 1, true},
		{"no CapBnd", head, 0, false},
		{"not hex", head + "CapBnd:\tzz\n", 0, false},
		{"empty", "", 0, false},
	} {
		got, err := statusCapBnd(tt.status)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%s: statusCapBnd = %#x, %v", tt.name, got, err)
		}
	}
}

// FuzzParseGVisorIDs: no input makes the parser panic, and what it
// accepts keeps its promises (ids of the sandbox's 16-bit range, init
// neither root nor the commands' uid) and reads back as it was written.
func FuzzParseGVisorIDs(f *testing.F) {
	for _, s := range []string{"1000:1000:65535", "0:0:65535", "1000:1000", "1:2:3:4", "+1:1:2", "1000:1000:0", "65536:1:2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, g, i, err := parseGVisorIDs(s)
		if err != nil {
			return
		}
		for _, id := range []int{u, g, i} {
			if id < 0 || id >= 1<<16 {
				t.Fatalf("parseGVisorIDs(%q) = %d %d %d: past the range", s, u, g, i)
			}
		}
		if i == 0 || i == u {
			t.Fatalf("parseGVisorIDs(%q) = %d %d %d: init as root or as the commands", s, u, g, i)
		}
		if u2, g2, i2, err := parseGVisorIDs(FormatGVisorIDs(u, g, i)); err != nil || u2 != u || g2 != g || i2 != i {
			t.Fatalf("%q read back as %d %d %d %v", FormatGVisorIDs(u, g, i), u2, g2, i2, err)
		}
	})
}

// FuzzStatusCapBnd: no /proc/self/status text makes the parser panic,
// and a set it reads is the CapBnd line's.
func FuzzStatusCapBnd(f *testing.F) {
	f.Add("CapPrm:\t0000000000000080\nCapBnd:\t0000000000000000\n")
	f.Add("CapBnd:\t000001ffffffffff")
	f.Add("CapBnd:zz")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := statusCapBnd(s)
		if err == nil && got != 0 && !strings.Contains(s, "CapBnd:") {
			t.Fatalf("statusCapBnd(%q) = %#x with no CapBnd line", s, got)
		}
	})
}
