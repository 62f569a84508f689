package image

import (
	"regexp"
	"testing"
)

// The patterns isName and isDigest implement by hand.
var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:@-]{0,254}$`)
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

func FuzzNameAndDigest(f *testing.F) {
	for _, s := range []string{"", "a", "docker.io/library/python:3.12", "-a", "A", "a b", "sha256:" + string(make([]byte, 64)),
		"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "a\n", string(make([]byte, 256))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isName(s), nameRE.MatchString(s); got != want {
			t.Errorf("isName(%q) = %v, want %v", s, got, want)
		}
		if got, want := isDigest(s), digestRE.MatchString(s); got != want {
			t.Errorf("isDigest(%q) = %v, want %v", s, got, want)
		}
	})
}
