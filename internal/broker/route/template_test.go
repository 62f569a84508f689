package route

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		params map[string]string
		errSub string // "" for success
	}{
		{"root", "GET", "/", nil, ""},
		{"literal", "GET", "/user", nil, ""},
		{"params", "GET", "/repos/{owner}/{repo}/issues", nil, ""},
		{"param first and last", "DELETE", "/{a}/x/{b_2}", nil, ""},
		{"underscore name", "PUT", "/{_x}", nil, ""},
		{"encoded literal", "GET", "/caf%C3%A9/a%20b", nil, ""},
		{"pattern", "POST", "/repos/{owner}/{repo}", map[string]string{"owner": "[a-z]+", "repo": `[\w.-]{1,100}`}, ""},
		{"every method", "OPTIONS", "/x", nil, ""},
		{"HEAD", "HEAD", "/x", nil, ""},
		{"PATCH", "PATCH", "/x", nil, ""},

		{"lower-case method", "get", "/x", nil, "method must be one of"},
		{"unknown method", "TRACE", "/x", nil, "method must be one of"},
		{"CONNECT", "CONNECT", "/x", nil, "method must be one of"},
		{"empty method", "", "/x", nil, "method must be one of"},
		{"empty path", "GET", "", nil, "must start with /"},
		{"relative path", "GET", "x/y", nil, "must start with /"},
		{"trailing slash", "GET", "/x/", nil, "trailing slash"},
		{"trailing slash after param", "GET", "/{x}/", nil, "trailing slash"},
		{"empty segment", "GET", "/a//b", nil, "empty segment"},
		{"leading double slash", "GET", "//a", nil, "empty segment"},
		{"dot", "GET", "/a/./b", nil, "dot segment"},
		{"dot-dot", "GET", "/a/..", nil, "dot segment"},
		{"encoded dot-dot", "GET", "/a/%2e%2E", nil, "dot segment"},
		{"encoded slash", "GET", "/a%2Fb", nil, "encoded slash"},
		{"semicolon", "GET", "/a;b", nil, "semicolon"},
		{"space", "GET", "/a b", nil, "raw space"},
		{"partial param", "GET", "/x{owner}", nil, "braces must enclose a whole segment"},
		{"unclosed param", "GET", "/{owner", nil, "braces must enclose a whole segment"},
		{"unopened param", "GET", "/owner}", nil, "braces must enclose a whole segment"},
		{"lone brace", "GET", "/{", nil, "braces must enclose a whole segment"},
		{"encoded brace", "GET", "/%7Bowner%7D", nil, "braces must enclose a whole segment"},
		{"nested braces", "GET", "/{{x}}", nil, "parameter name"},
		{"empty name", "GET", "/{}", nil, "parameter name"},
		{"upper-case name", "GET", "/{Owner}", nil, "parameter name"},
		{"digit first", "GET", "/{1x}", nil, "parameter name"},
		{"dash in name", "GET", "/{a-b}", nil, "parameter name"},
		{"duplicate name", "GET", "/{a}/x/{a}", nil, `parameter "a" appears twice`},
		{"pattern for unknown", "GET", "/{a}", map[string]string{"b": "x"}, `pattern given for "b"`},
		{"pattern without params", "GET", "/user", map[string]string{"a": "x"}, `pattern given for "a"`},
		{"bad pattern", "GET", "/{a}", map[string]string{"a": "[a-"}, `parameter "a": bad pattern`},
		{"empty pattern", "GET", "/{a}", map[string]string{"a": ""}, `parameter "a": bad pattern: empty pattern`},
		{"escaping pattern", "GET", "/{a}", map[string]string{"a": "x)|(.*"}, `parameter "a": bad pattern`},
		{"too long", "GET", "/" + strings.Repeat("a", MaxPathLen), nil, "path longer than"},
		{"too many segments", "GET", strings.Repeat("/a", MaxSegments+1), nil, "more than 64 segments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ParseTemplate(tt.method, tt.path, tt.params)
			if tt.errSub == "" {
				if err != nil {
					t.Fatalf("ParseTemplate(%q, %q) = %v, want success", tt.method, tt.path, err)
				}
				if tmpl.Method != tt.method || tmpl.Path != tt.path {
					t.Errorf("got Method %q Path %q, want %q %q", tmpl.Method, tmpl.Path, tt.method, tt.path)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseTemplate(%q, %q) succeeded, want error containing %q", tt.method, tt.path, tt.errSub)
			}
			if !errors.Is(err, ErrInvalidTemplate) {
				t.Errorf("error %v is not ErrInvalidTemplate", err)
			}
			if errors.Is(err, ErrSuspicious) {
				t.Errorf("error %v is ErrSuspicious; a bad policy is not a suspicious request", err)
			}
			if !strings.Contains(err.Error(), tt.errSub) {
				t.Errorf("error = %q, want it to contain %q", err, tt.errSub)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	mustT := func(method, path string, params map[string]string) *Template {
		t.Helper()
		tmpl, err := ParseTemplate(method, path, params)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	issues := mustT("GET", "/repos/{owner}/{repo}/issues", nil)
	lower := mustT("GET", "/u/{name}", map[string]string{"name": "[a-z]+"})
	alt := mustT("GET", "/v/{x}", map[string]string{"x": "a|b"})
	anything := mustT("GET", "/any/{x}", map[string]string{"x": ".*"})
	root := mustT("GET", "/", nil)
	cafe := mustT("POST", "/caf%C3%A9/%41", nil)

	tests := []struct {
		name   string
		tmpl   *Template
		method string
		segs   []string
		want   map[string]string // nil: no match
	}{
		{"params", issues, "GET", []string{"repos", "octo-org", "hello.go", "issues"},
			map[string]string{"owner": "octo-org", "repo": "hello.go"}},
		{"method mismatch", issues, "POST", []string{"repos", "o", "r", "issues"}, nil},
		{"method case", issues, "get", []string{"repos", "o", "r", "issues"}, nil},
		{"HEAD is not GET", issues, "HEAD", []string{"repos", "o", "r", "issues"}, nil},
		{"too few segments", issues, "GET", []string{"repos", "o", "r"}, nil},
		{"too many segments", issues, "GET", []string{"repos", "o", "r", "issues", "1"}, nil},
		{"literal mismatch", issues, "GET", []string{"repos", "o", "r", "pulls"}, nil},
		{"literal case", issues, "GET", []string{"Repos", "o", "r", "issues"}, nil},
		{"default pattern refuses space", issues, "GET", []string{"repos", "a b", "r", "issues"}, nil},
		{"default pattern refuses UTF-8", issues, "GET", []string{"repos", "café", "r", "issues"}, nil},
		{"default pattern refuses colon", issues, "GET", []string{"repos", "a:b", "r", "issues"}, nil},
		{"default pattern refuses dot-dot", issues, "GET", []string{"repos", "..", "r", "issues"}, nil},
		{"default pattern refuses dot", issues, "GET", []string{"repos", "o", ".", "issues"}, nil},
		{"pattern", lower, "GET", []string{"u", "abc"}, map[string]string{"name": "abc"}},
		{"pattern anchored at end", lower, "GET", []string{"u", "abc1"}, nil},
		{"pattern anchored at start", lower, "GET", []string{"u", "1abc"}, nil},
		{"pattern never sees a slash", lower, "GET", []string{"u", "abc/def"}, nil},
		{"alternation anchored", alt, "GET", []string{"v", "a"}, map[string]string{"x": "a"}},
		{"alternation anchored left", alt, "GET", []string{"v", "ab"}, nil},
		{"alternation anchored right", alt, "GET", []string{"v", "xb"}, nil},
		{"permissive pattern", anything, "GET", []string{"any", "a b"}, map[string]string{"x": "a b"}},
		{"permissive pattern refuses dot-dot", anything, "GET", []string{"any", ".."}, nil},
		{"permissive pattern refuses empty", anything, "GET", []string{"any", ""}, nil},
		{"permissive pattern refuses slash", anything, "GET", []string{"any", "a/../b"}, nil},
		{"permissive pattern refuses backslash", anything, "GET", []string{"any", `..\b`}, nil},
		{"permissive pattern refuses NUL", anything, "GET", []string{"any", "a\x00"}, nil},
		{"root", root, "GET", []string{}, map[string]string{}},
		{"root nil segs", root, "GET", nil, map[string]string{}},
		{"root vs one", root, "GET", []string{"x"}, nil},
		{"decoded literal", cafe, "POST", []string{"café", "A"}, map[string]string{}},
		{"literal not re-decoded", cafe, "POST", []string{"caf%C3%A9", "A"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.tmpl.Match(tt.method, tt.segs)
			if tt.want == nil {
				if ok || got != nil {
					t.Errorf("%s.Match(%q, %q) = %q, %v; want no match", tt.tmpl, tt.method, tt.segs, got, ok)
				}
				return
			}
			if !ok || got == nil || !maps.Equal(got, tt.want) {
				t.Errorf("%s.Match(%q, %q) = %q, %v; want %q, true", tt.tmpl, tt.method, tt.segs, got, ok, tt.want)
			}
		})
	}
}

// TestMatchFromWire runs raw request paths through Normalize and Match, the
// way the broker does, so that encoded traversal is seen to fail end to end.
func TestMatchFromWire(t *testing.T) {
	tmpl, err := ParseOperation("GET /repos/{owner}/{repo}/issues")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		raw  string
		want map[string]string // nil: refused or no match
	}{
		{"/repos/o/r/issues", map[string]string{"owner": "o", "repo": "r"}},
		{"/repos/%6F/r/issues", map[string]string{"owner": "o", "repo": "r"}},
		{"/repos/o/r/issues/", nil},
		{"/repos/o/r/issues/../../../admin", nil},
		{"/repos/o/..%2F..%2Fadmin/issues", nil},
		{"/repos/o/%2e%2e/issues", nil},
		{"/repos/o/r;x=1/issues", nil},
		{"/repos//o/r/issues", nil},
		{"/repos/o/r%2Fissues", nil},
	}
	for _, tt := range tests {
		segs, err := Normalize(tt.raw)
		var got map[string]string
		ok := false
		if err == nil {
			got, ok = tmpl.Match("GET", segs)
		}
		switch {
		case tt.want == nil && ok:
			t.Errorf("%q matched with %q, want refusal or no match", tt.raw, got)
		case tt.want != nil && (!ok || !maps.Equal(got, tt.want)):
			t.Errorf("%q: got %q, %v (err %v), want %q", tt.raw, got, ok, err, tt.want)
		}
	}
}

func TestParseOperation(t *testing.T) {
	tests := []struct {
		line       string
		wantMethod string
		wantPath   string
		errSub     string
	}{
		{"GET /repos/{owner}/{repo}/issues", "GET", "/repos/{owner}/{repo}/issues", ""},
		{"POST /", "POST", "/", ""},
		{"DELETE /user/keys/{key_id}", "DELETE", "/user/keys/{key_id}", ""},
		{"", "", "", "want METHOD /path"},
		{"GET", "", "", "want METHOD /path"},
		{"/user", "", "", "want METHOD /path"},
		{"GET\t/user", "", "", "want METHOD /path"},
		{"GET  /user", "", "", "must start with /"},
		{" GET /user", "", "", "method must be one of"},
		{"GET /user ", "", "", "raw space"},
		{"GET /a /b", "", "", "raw space"},
		{"get /user", "", "", "method must be one of"},
		{"GET user", "", "", "must start with /"},
		{"GET /user/", "", "", "trailing slash"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			tmpl, err := ParseOperation(tt.line)
			if tt.errSub != "" {
				if err == nil {
					t.Fatalf("ParseOperation(%q) succeeded, want error containing %q", tt.line, tt.errSub)
				}
				if !errors.Is(err, ErrInvalidTemplate) || !strings.Contains(err.Error(), tt.errSub) {
					t.Errorf("ParseOperation(%q) = %v, want ErrInvalidTemplate containing %q", tt.line, err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseOperation(%q) = %v", tt.line, err)
			}
			if tmpl.Method != tt.wantMethod || tmpl.Path != tt.wantPath {
				t.Errorf("ParseOperation(%q) = %q %q, want %q %q", tt.line, tmpl.Method, tmpl.Path, tt.wantMethod, tt.wantPath)
			}
			if got := tmpl.String(); got != tt.line {
				t.Errorf("String() = %q, want %q", got, tt.line)
			}
		})
	}
}

// TestCompileParamAnchors checks the anchoring itself, without the value
// checks Match adds in front of it.
func TestCompileParamAnchors(t *testing.T) {
	tests := []struct {
		pat, v string
		want   bool
	}{
		{"[a-z]+", "abc", true},
		{"[a-z]+", "abc1", false},
		{"[a-z]+", "abc\n", false},
		{"a|b", "a", true},
		{"a|b", "ab", false},
		{"(?m)^a$", "a", true},
		{"(?m)^a$", "a\na", false},
		{"(?m)a$", "a\n", false},
		{"[)]", ")", true},
		{`\Qa)\E`, "a)", true},
	}
	for _, tt := range tests {
		re, err := compileParam(tt.pat)
		if err != nil {
			t.Fatalf("compileParam(%q): %v", tt.pat, err)
		}
		if got := re.MatchString(tt.v); got != tt.want {
			t.Errorf("compileParam(%q).MatchString(%q) = %v, want %v", tt.pat, tt.v, got, tt.want)
		}
	}
	for _, pat := range []string{"x)|(.*", "(", ")", "a)(b", `\Qa`} {
		if re, err := compileParam(pat); err == nil {
			t.Errorf("compileParam(%q) = %v, want error", pat, re)
		}
	}
}
