package policy

import (
	"errors"
	"testing"
)

func TestNarrow(t *testing.T) {
	var allowed []Destination
	for _, s := range []Spec{{Host: "api.example.com"}, {Host: "*.pypi.org:443,80"}, {Host: "8.8.8.0/24:443"}, {Host: "10.1.0.0/16:5432", Private: true, Opaque: true}} {
		d, err := Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, d)
	}
	for _, tc := range []struct {
		asked string
		ok    bool
	}{
		{"api.example.com", true},
		{"api.example.com:443", true},
		{"api.example.com:80", false},   // a port the tool does not allow
		{"example.com", false},          // the parent of an allowed name
		{"evil.api.example.com", false}, // a subdomain of a name that is no wildcard
		{"files.pypi.org", true},        // under the wildcard
		{"files.pypi.org:80", true},     // with a port it allows
		{"*.pypi.org", true},            // the wildcard itself
		{"*.files.pypi.org", true},      // a narrower wildcard
		{"pypi.org", false},             // a wildcard covers strict subdomains only
		{"evilpypi.org", false},         // a suffix that is no subdomain
		{"8.8.8.7", true},               // an address in the range
		{"8.8.8.128/25", true},          // a smaller range in it
		{"8.8.8.0/23", false},           // a larger range
		{"1.1.1.1", false},              // outside
		{"10.1.2.3:5432", true},         // private, within a private destination
		{"10.2.0.1:5432", false},        // private, outside it
		{"169.254.169.254:80", false},   // metadata, never
		{"*.org", false},                // wider than the wildcard
		{"not a host", false},           // not a destination at all
	} {
		got, err := Narrow(allowed, []string{tc.asked})
		if (err == nil) != tc.ok {
			t.Errorf("Narrow(%q) = %v, %v; want allowed %v", tc.asked, got, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Narrow(%q): %v is not ErrInvalid", tc.asked, err)
		}
	}
	got, err := Narrow(allowed, []string{"10.1.2.3:5432"})
	if err != nil || !got[0].Opaque || !got[0].Private {
		t.Errorf("a narrowed private destination: %+v %v, want it opaque as the one covering it", got, err)
	}
	if got, err := Narrow(allowed, nil); err != nil || len(got) != 0 {
		t.Errorf("narrowing to nothing: %v %v", got, err)
	}
}
