package imageref

import (
	"regexp"
	"strings"
	"testing"
)

// The patterns isName and IsDigest implement by hand.
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
		if got, want := IsDigest(s), digestRE.MatchString(s); got != want {
			t.Errorf("IsDigest(%q) = %v, want %v", s, got, want)
		}
	})
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"python", "python:3.12", "docker.io/library/python:3.12", "a", "my-tool_1.0"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "host", "Python", "-x", "sha256:abc", "a b", "a\nb", strings.Repeat("a", 256), "../x"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
	if err := Check("sha256:" + strings.Repeat("a", 64)); err != nil {
		t.Error(err)
	}
	if err := Check("sha256:abc"); err == nil {
		t.Error("short digest accepted")
	}
}
