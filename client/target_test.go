package client

import (
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{in: "127.0.0.1:7400", want: "http://127.0.0.1:7400"},
		{in: "http://front:8080", want: "http://front:8080"},
		{in: "https://airlock.example", want: "https://airlock.example"},
		{in: "https://airlock.example/api/", want: "https://airlock.example/api"},
		{in: "http://[::1]:7400", want: "http://[::1]:7400"},
		{in: "", err: "no address"},
		{in: "unix:///run/airlock.sock", err: "scheme must be http or https"},
		{in: "ftp://h:1", err: "scheme must be http or https"},
		{in: "http://", err: "no host"},
		{in: "http://:7400", err: "no host"},
		{in: "http://u:p@h:1", err: "no user or password"},
		{in: "http://h:1/?x=1", err: "no query"},
		{in: "http://h:1/#f", err: "no query or fragment"},
		{in: "http://h:0", err: "bad port"},
		{in: "http://h:99999", err: "bad port"},
		{in: "http://h :1", err: "want http://HOST:PORT"},
	} {
		u, err := ParseTarget(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: %v, want an error with %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || u.String() != tt.want):
			t.Errorf("%q: %v %v, want %s", tt.in, u, err, tt.want)
		}
	}
}

// FuzzParseTarget: whatever is given, an accepted target is an http or
// https URL with a host and nothing a request would carry elsewhere.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7400", "https://h/p/", "http://u@h", "h:1?q", "[::1]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseTarget(s)
		if err != nil {
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(u.Path, "/") {
			t.Fatalf("%q accepted as %#v", s, u)
		}
	})
}
