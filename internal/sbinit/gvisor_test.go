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
