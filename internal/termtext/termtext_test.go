package termtext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain text, ünïcödé, 日本語, emoji 🙂", "plain text, ünïcödé, 日本語, emoji 🙂"},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"\x1b[2J\x1b]0;title\x07", `\x1b[2J\x1b]0;title\x07`},
		{"nul\x00 del\x7f", `nul\x00 del\x7f`},
		{"csi \u009b2J osc \u009d0;t\u009c", `csi \u009b2J osc \u009d0;t\u009c`},
		{"\u0080 \u0085 \u009f \u00a0", `\u0080 \u0085 \u009f ` + "\u00a0"}, // NBSP is printable
		{"line\u2028para\u2029end", `line\u2028para\u2029end`},
		{"raw \x9b and \x9d bytes", `raw \x9b and \x9d bytes`},
		{"cut \xc2", `cut \xc2`},
		{"overlong \xc0\x9b", `overlong \xc0\x9b`},
		{"\ufffd stays", "\ufffd stays"},
		// A backslash is doubled: text that reads like an escape ("\x1b"
		// typed out) is never taken for one of a real control.
		{`back\slash`, `back\\slash`},
		{`typed \x1b[2J`, `typed \\x1b[2J`},
		// Bidirectional controls reorder what follows them on screen.
		{"a\u202ebc\u2066d\u2069\u200f", `a\u202ebc\u2066d\u2069\u200f`},
	}
	for _, tt := range tests {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":"plain ü"}`, `{"a":"plain ü"}`},
		{"{\"a\":\"csi \u009b osc \u009d\"}", `{"a":"csi \u009b osc \u009d"}`},
		{"{\"a\":\"del \x7f\"}", `{"a":"del \u007f"}`},
		{"{\"a\":\"sep \u2028\u2029\"}", `{"a":"sep \u2028\u2029"}`},
		{"{\"a\":\"bidi \u202e\"}", `{"a":"bidi \u202e"}`},
		{`{"a":"back\\slash"}`, `{"a":"back\\slash"}`}, // JSON's own escape, kept
		{"{\"a\":\"bad \x9b\"}", `{"a":"bad \ufffd"}`},
		{"{\n  \"a\": 1\n}", "{\n  \"a\": 1\n}"}, // indentation is kept
	}
	for _, tt := range tests {
		got := JSON([]byte(tt.in))
		if string(got) != tt.want {
			t.Errorf("JSON(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// The same value, as a decoder reads it.
		var a, b any
		if json.Unmarshal([]byte(tt.in), &a) == nil {
			if err := json.Unmarshal(got, &b); err != nil {
				t.Errorf("JSON(%q) is no longer JSON: %v", tt.in, err)
			} else if x, y := mustJSON(a), mustJSON(b); x != y {
				t.Errorf("JSON(%q) changed the value: %s, was %s", tt.in, y, x)
			}
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// unsafeIn reports a byte sequence a terminal could act on.
func unsafeIn(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd"):
			return "invalid UTF-8"
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r == 0x7f, unsafeRune(r):
			return string(r)
		}
	}
	return ""
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "a\x1b[31mb", "\u009b\u009d\u2028", "\xc2\x9b\x9b\xff", "日本\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := String(s)
		if u := unsafeIn(got); u != "" || strings.ContainsAny(got, "\t\n\r") {
			t.Fatalf("String(%q) = %q keeps %q", s, got, u)
		}
		if firstUnsafe(s, true) < 0 && got != s {
			t.Fatalf("String(%q) changed safe text to %q", s, got)
		}
		if j := JSON([]byte(s)); unsafeIn(string(j)) != "" {
			t.Fatalf("JSON(%q) = %q keeps %q", s, j, unsafeIn(string(j)))
		}
	})
}
