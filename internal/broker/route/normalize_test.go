package route

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	long := func(n int, s string) string { return strings.Repeat(s, n) }
	// segsOf builds "/x/x/..." with n segments.
	segsOf := func(n int, seg string) string { return long(n, "/"+seg) }

	tests := []struct {
		name    string
		raw     string
		want    []string // nil: refused
		problem string   // substring of PathError.Problem when refused
	}{
		// Valid.
		{"root", "/", []string{}, ""},
		{"one", "/user", []string{"user"}, ""},
		{"several", "/repos/octo-org/hello_world.go/issues", []string{"repos", "octo-org", "hello_world.go", "issues"}, ""},
		{"unreserved", "/a~b/-x_y.z/AZaz09", []string{"a~b", "-x_y.z", "AZaz09"}, ""},
		{"sub-delims", "/a@b:c+d=e,f/$&'()*!", []string{"a@b:c+d=e,f", "$&'()*!"}, ""},
		{"encoded space", "/a%20b", []string{"a b"}, ""},
		{"plus is not space", "/a+b", []string{"a+b"}, ""},
		{"encoded UTF-8", "/caf%C3%A9", []string{"café"}, ""},
		{"lower-case hex", "/caf%c3%a9", []string{"café"}, ""},
		{"encoded unreserved", "/%41%42%7e", []string{"AB~"}, ""},
		{"encoded braces", "/%7Bx%7D", []string{"{x}"}, ""},
		{"dots inside", "/a.b/.a/a./..a/a..", []string{"a.b", ".a", "a.", "..a", "a.."}, ""},
		{"encoded dot inside", "/v1%2E0", []string{"v1.0"}, ""},
		{"four-byte UTF-8", "/%F0%9F%94%91", []string{"🔑"}, ""},
		{"64 segments", segsOf(64, "a"), slices.Repeat([]string{"a"}, 64), ""},
		{"256-byte segment", "/" + long(256, "a"), []string{long(256, "a")}, ""},
		{"256 decoded from 768", "/" + long(256, "%41"), []string{long(256, "A")}, ""},
		{"2048 bytes", segsOf(8, long(255, "a")), slices.Repeat([]string{long(255, "a")}, 8), ""},

		// Request-target forms.
		{"empty", "", nil, "empty path"},
		{"asterisk", "*", nil, "asterisk-form"},
		{"relative", "a/b", nil, "does not start with /"},
		{"authority-form", "example.com:443", nil, "does not start with /"},
		{"absolute-form", "http://x/y", nil, "absolute-form"},
		{"absolute-form https", "https://x/", nil, "absolute-form"},
		{"scheme inside path", "/redirect/http://x", nil, "absolute-form"},
		{"scheme-relative", "//x/y", nil, "scheme-relative"},
		{"scheme-relative bare", "//", nil, "scheme-relative"},

		// Empty segments.
		{"double slash", "/a//b", nil, "empty segment"},
		{"double slash at end", "/a//", nil, "empty segment"},
		{"trailing slash", "/a/", nil, "trailing slash"},
		{"trailing slash deep", "/a/b/c/", nil, "trailing slash"},

		// Dot segments, in every spelling.
		{"dot", "/.", nil, "dot segment"},
		{"dot-dot", "/..", nil, "dot segment"},
		{"dot inner", "/a/./b", nil, "dot segment"},
		{"dot-dot inner", "/a/../b", nil, "dot segment"},
		{"%2e", "/%2e", nil, "dot segment"},
		{"%2E", "/a/%2E/b", nil, "dot segment"},
		{"%2e%2e", "/a/%2e%2e/b", nil, "dot segment"},
		{"%2E%2E", "/a/%2E%2E", nil, "dot segment"},
		{".%2e", "/a/.%2e/b", nil, "dot segment"},
		{"%2e.", "/a/%2e./b", nil, "dot segment"},
		{"%2E%2e mixed", "/%2E%2e", nil, "dot segment"},
		{"three dots", "/a/.../b", nil, "dot segment"},
		{"encoded three dots", "/a/%2e%2e%2E", nil, "dot segment"},

		// Slashes and backslashes.
		{"%2F", "/a%2Fb", nil, "encoded slash"},
		{"%2f", "/a%2fb", nil, "encoded slash"},
		{"%2F traversal", "/repos/a/b/..%2F..%2Fadmin", nil, "encoded slash"},
		{"%5C", "/a%5Cb", nil, "encoded backslash"},
		{"%5c", "/a%5cb", nil, "encoded backslash"},
		{"backslash", "/a\\b", nil, "backslash"},
		{"backslash traversal", "/a/..\\..\\admin", nil, "backslash"},
		{"backslash host", "/\\evil.example/x", nil, "backslash"},

		// Control bytes, spaces, raw high bytes.
		{"NUL", "/a\x00b", nil, "control byte"},
		{"tab", "/a\tb", nil, "control byte"},
		{"LF", "/a\nb", nil, "control byte"},
		{"CR", "/a\rb", nil, "control byte"},
		{"0x1F", "/a\x1fb", nil, "control byte"},
		{"DEL", "/a\x7fb", nil, "control byte"},
		{"%00", "/a%00b", nil, "encoded control byte"},
		{"%0a", "/a%0ab", nil, "encoded control byte"},
		{"%0D%0A", "/a%0D%0AX-Injected:%201", nil, "encoded control byte"},
		{"%1F", "/a%1Fb", nil, "encoded control byte"},
		{"%7F", "/a%7Fb", nil, "encoded control byte"},
		{"%7f", "/a%7fb", nil, "encoded control byte"},
		{"raw space", "/a b", nil, "raw space"},
		{"raw UTF-8", "/caf\xc3\xa9", nil, "raw byte >= 0x80"},
		{"raw 0xFF", "/\xff", nil, "raw byte >= 0x80"},

		// Percent-encoding.
		{"lone %", "/a%", nil, "malformed percent-encoding"},
		{"% one digit", "/a%2", nil, "malformed percent-encoding"},
		{"% one digit mid", "/a%2/b", nil, "malformed percent-encoding"},
		{"% not hex", "/a%zz", nil, "malformed percent-encoding"},
		{"% half hex", "/a%g0", nil, "malformed percent-encoding"},
		{"%%", "/%%41", nil, "malformed percent-encoding"},
		{"IIS %u", "/%u002e%u002e", nil, "malformed percent-encoding"},
		{"%25", "/%25", nil, "encoded percent"},
		{"double-encoded slash", "/a%252Fb", nil, "encoded percent"},
		{"double-encoded dot", "/%252e%252e", nil, "encoded percent"},

		// Invalid UTF-8 after decoding.
		{"overlong dot", "/%C0%AE", nil, "invalid UTF-8"},
		{"overlong dot-dot", "/%C0%AE%C0%AE", nil, "invalid UTF-8"},
		{"overlong slash", "/a%C0%AFb", nil, "invalid UTF-8"},
		{"overlong dot 3-byte", "/%E0%80%AE", nil, "invalid UTF-8"},
		{"surrogate", "/%ED%A0%80", nil, "invalid UTF-8"},
		{"lone continuation", "/%80", nil, "invalid UTF-8"},
		{"0xFF encoded", "/%FF", nil, "invalid UTF-8"},
		{"truncated sequence", "/caf%C3", nil, "invalid UTF-8"},
		{"bad continuation", "/%C3%28", nil, "invalid UTF-8"},
		{"beyond U+10FFFF", "/%F4%90%80%80", nil, "invalid UTF-8"},
		{"C1 control NEL", "/a%C2%85b", nil, "control character"},

		// Delimiters that change meaning once decoded.
		{"semicolon", "/a;b", nil, "semicolon"},
		{"path parameter", "/admin;jsessionid=x/y", nil, "semicolon"},
		{"%3B", "/a%3Bb", nil, "encoded semicolon"},
		{"%3b", "/a%3bb", nil, "encoded semicolon"},
		{"%3F", "/a%3Fb", nil, "encoded ?"},
		{"%3f", "/a%3f", nil, "encoded ?"},
		{"%23", "/a%23b", nil, "encoded #"},
		{"raw ?", "/a?b=c", nil, "query not split off"},
		{"raw #", "/a#b", nil, "fragment"},

		// Lengths.
		{"2049 bytes", "/" + long(2048, "a"), nil, "longer than 2048"},
		{"65 segments", segsOf(65, "a"), nil, "more than 64 segments"},
		{"257-byte segment", "/" + long(257, "a"), nil, "segment longer than 256"},
		{"257 decoded bytes", "/" + long(257, "%41"), nil, "segment longer than 256"},
		{"canonical too long", segsOf(8, long(250, "!")), nil, "canonical form longer than 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.raw)
			if tt.want != nil {
				if err != nil {
					t.Fatalf("Normalize(%q) = %v, want %q", tt.raw, err, tt.want)
				}
				if got == nil || !slices.Equal(got, tt.want) {
					t.Errorf("Normalize(%q) = %q, want %q", tt.raw, got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Normalize(%q) = %q, want refusal %q", tt.raw, got, tt.problem)
			}
			if got != nil {
				t.Errorf("Normalize(%q) returned segments %q with error", tt.raw, got)
			}
			if !errors.Is(err, ErrSuspicious) {
				t.Errorf("Normalize(%q) error %v is not ErrSuspicious", tt.raw, err)
			}
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("Normalize(%q) error %T is not *PathError", tt.raw, err)
			}
			if !strings.Contains(pe.Problem, tt.problem) {
				t.Errorf("Normalize(%q) problem = %q, want it to contain %q", tt.raw, pe.Problem, tt.problem)
			}
		})
	}
}

func TestPathErrorEcho(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{"short", "/a%2Fb", `suspicious path "/a%2Fb": encoded slash (%2F)`},
		{"control bytes quoted", "/a\r\nb", `suspicious path "/a\r\nb": control byte`},
		{"cut at 128", "/" + strings.Repeat("a", 2100),
			`suspicious path "/` + strings.Repeat("a", 127) + `"...: path longer than 2048 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Normalize(tt.raw)
			if err == nil {
				t.Fatalf("Normalize(%q) succeeded", tt.raw)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			var pe *PathError
			if errors.As(err, &pe) && len(pe.Path) > maxEcho {
				t.Errorf("PathError.Path holds %d bytes, want at most %d", len(pe.Path), maxEcho)
			}
		})
	}

	// Built by hand with a long Path, Error still cuts it.
	pe := &PathError{Path: strings.Repeat("x", 1000), Problem: "p"}
	if got, want := len(pe.Error()), len(`suspicious path ""...: p`)+maxEcho; got != want {
		t.Errorf("hand-built PathError: len(Error()) = %d, want %d", got, want)
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		segs []string
		want string
	}{
		{nil, "/"},
		{[]string{}, "/"},
		{[]string{"user"}, "/user"},
		{[]string{"repos", "o", "r"}, "/repos/o/r"},
		{[]string{"a b"}, "/a%20b"},
		{[]string{"café"}, "/caf%C3%A9"},
		{[]string{"a,b", "a@b:c+d=e", "~-_."}, "/a%2Cb/a@b:c+d=e/~-_."},
		{[]string{"{x}", "!*'()"}, "/%7Bx%7D/%21%2A%27%28%29"},
	}
	for _, tt := range tests {
		if got := Join(tt.segs); got != tt.want {
			t.Errorf("Join(%q) = %q, want %q", tt.segs, got, tt.want)
		}
	}
}

func TestJoinRoundTrip(t *testing.T) {
	for _, raw := range []string{
		"/",
		"/user",
		"/a%20b/caf%C3%A9",
		"/a@b:c+d=e,f/$&'()*!",
		"/%7Bx%7D/%F0%9F%94%91",
		"/v1%2E0/a..",
		"/" + strings.Repeat("%41", 256),
		strings.Repeat("/a", 64),
	} {
		segs, err := Normalize(raw)
		if err != nil {
			t.Fatalf("Normalize(%q): %v", raw, err)
		}
		joined := Join(segs)
		got, err := Normalize(joined)
		if err != nil {
			t.Fatalf("Normalize(Join(Normalize(%q))) = Normalize(%q): %v", raw, joined, err)
		}
		if !slices.Equal(got, segs) {
			t.Errorf("Normalize(%q) = %q, want %q", joined, got, segs)
		}
		if again := Join(got); again != joined {
			t.Errorf("Join is not stable: %q then %q", joined, again)
		}
	}
}
