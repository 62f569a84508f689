package sbinit

import "testing"

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
