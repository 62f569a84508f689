package route

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var fuzzPaths = []string{
	"", "/", "*", "/user", "/repos/o/r/issues", "/a%20b", "/caf%C3%A9", "/a//b", "/a/",
	"/.", "/..", "/%2e%2E", "/.%2e", "/a%2Fb", "/a%5cb", "/a\\b", "/a%00", "/a\x00",
	"/%25", "/%C0%AE", "/%ED%A0%80", "/a;b", "/a%3B", "/a%3F", "/a%23", "//x/y",
	"http://x/y", "/a@b:c+d=e,f", "/$&'()*!", "/%7Bx%7D", "/%C2%85", "/%F0%9F%94%91",
}

func FuzzNormalize(f *testing.F) {
	for _, p := range fuzzPaths {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		segs, err := Normalize(raw)
		if err != nil {
			if segs != nil {
				t.Fatalf("Normalize(%q) returned segments and error %v", raw, err)
			}
			// At most maxEcho input bytes, each quoted as at most
			// four ("\xff"), plus the fixed words.
			if len(err.Error()) > 4*maxEcho+100 {
				t.Fatalf("Normalize(%q) error is %d bytes long", raw, len(err.Error()))
			}
			return
		}
		if segs == nil {
			t.Fatalf("Normalize(%q) returned nil segments without error", raw)
		}
		if len(segs) > MaxSegments {
			t.Fatalf("Normalize(%q) returned %d segments", raw, len(segs))
		}
		for _, s := range segs {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("Normalize(%q) returned segment %q", raw, s)
			}
			if len(s) > MaxSegmentLen {
				t.Fatalf("Normalize(%q) returned a %d-byte segment", raw, len(s))
			}
			if strings.ContainsAny(s, "/\\;%") {
				t.Fatalf("Normalize(%q) returned segment %q", raw, s)
			}
			for i := 0; i < len(s); i++ {
				if s[i] < 0x20 || s[i] == 0x7f {
					t.Fatalf("Normalize(%q) returned segment %q with a control byte", raw, s)
				}
			}
			if !utf8.ValidString(s) {
				t.Fatalf("Normalize(%q) returned invalid UTF-8 %q", raw, s)
			}
		}
		joined := Join(segs)
		if len(joined) > MaxPathLen {
			t.Fatalf("Join(Normalize(%q)) is %d bytes", raw, len(joined))
		}
		again, err := Normalize(joined)
		if err != nil {
			t.Fatalf("Normalize(Join(Normalize(%q))) = Normalize(%q): %v", raw, joined, err)
		}
		if !slices.Equal(again, segs) {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q", raw, segs, joined, again)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("GET", "/repos/o/r/issues", "GET", "/repos/{owner}/{repo}/issues", "[a-z]+")
	f.Add("GET", "/u/abc1", "GET", "/u/{name}", "[a-z]+")
	f.Add("POST", "/", "POST", "/", "")
	f.Add("GET", "/caf%C3%A9/x", "GET", "/caf%C3%A9/{a}", ".*")
	f.Add("GET", "/a/b", "GET", "/{a}/{b}", "x)|(.*")
	f.Add("DELETE", "/a/%2e%2e", "DELETE", "/a/{b}", "")
	f.Fuzz(func(t *testing.T, method, raw, tmethod, tpath, pattern string) {
		// Give the pattern to the first parameter, if there is one, so
		// that random patterns reach Match.
		var params map[string]string
		if pattern != "" {
			if i := strings.Index(tpath, "/{"); i >= 0 {
				if j := strings.IndexByte(tpath[i:], '}'); j > 2 {
					params = map[string]string{tpath[i+2 : i+j]: pattern}
				}
			}
		}
		tmpl, err := ParseTemplate(tmethod, tpath, params)
		if err != nil {
			return
		}
		// Match must hold up on segments Normalize never produces, too.
		cands := [][]string{strings.Split(raw, "/")}
		if segs, err := Normalize(raw); err == nil {
			cands = append(cands, segs)
		}
		for _, segs := range cands {
			vals, ok := tmpl.Match(method, segs)
			if !ok {
				if vals != nil {
					t.Fatalf("no match but values %q", vals)
				}
				continue
			}
			if method != tmpl.Method {
				t.Fatalf("%s matched method %q", tmpl, method)
			}
			if len(segs) != len(tmpl.segs) {
				t.Fatalf("%s matched %d segments %q", tmpl, len(segs), segs)
			}
			for i, ts := range tmpl.segs {
				if ts.name == "" {
					if segs[i] != ts.lit {
						t.Fatalf("%s matched %q against literal %q", tmpl, segs[i], ts.lit)
					}
					continue
				}
				v, found := vals[ts.name]
				if !found || v != segs[i] {
					t.Fatalf("%s: %s = %q, %v, want %q", tmpl, ts.name, v, found, segs[i])
				}
				if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\\") {
					t.Fatalf("%s matched parameter %s = %q", tmpl, ts.name, v)
				}
				if !ts.re.MatchString(v) {
					t.Fatalf("%s: %s = %q does not match its pattern", tmpl, ts.name, v)
				}
			}
			if len(vals) != countParams(tmpl) {
				t.Fatalf("%s returned %d values, want %d", tmpl, len(vals), countParams(tmpl))
			}
		}
	})
}

func countParams(t *Template) int {
	n := 0
	for _, s := range t.segs {
		if s.name != "" {
			n++
		}
	}
	return n
}
