// Package termtext escapes text that someone else chose — a sandbox (an
// egress destination, an error), a caller (an argv, a tool name), a
// daemon or front reached over the network — before the CLI prints it on
// a terminal. A terminal acts on control characters: ESC (U+001B) and
// CSI (U+009B) start sequences that move the cursor, rewrite the screen
// or set the window's title, OSC (U+009D) those that some terminals use
// for links and the clipboard. Printed raw, such a string could hide a
// line of the audit log, or forge one. U+2028 and U+2029 end lines in
// some viewers; the bidirectional controls (U+200E, U+200F, U+202A to
// U+202E, U+2066 to U+2069) reorder what follows them on screen, so a
// line could read otherwise than its bytes. A backslash is doubled, so
// that no text can pass for an escape of another.
package termtext

import (
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// String returns s with what a terminal could act on written as escapes:
// tab, newline and carriage return as \t, \n and \r, the other C0
// controls and DEL as \xNN, the C1 controls (U+0080 to U+009F), the
// line and paragraph separators (U+2028, U+2029) and the bidirectional
// controls as \uNNNN, each byte that is not UTF-8 as \xNN, and a
// backslash as \\. The rest is unchanged.
func String(s string) string {
	i := firstUnsafe(s, true)
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, '\\', 'x', hex[s[i]>>4], hex[s[i]&0xf])
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r < 0x20 || r == 0x7f:
			b = append(b, '\\', 'x', hex[r>>4], hex[r&0xf])
		case unsafeRune(r):
			b = appendU(b, r)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// JSON returns the JSON text b with the same characters written as JSON
// escapes (\u009b), and each byte that is not UTF-8 as \ufffd (what a
// decoder reads it as): the same JSON value, safe to print. Outside its
// strings JSON text is ASCII without controls but for whitespace, which
// is left alone; inside them, tab, newline and carriage return are
// already escapes in valid JSON.
func JSON(b []byte) []byte {
	i := firstUnsafe(string(b), false)
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = appendU(out, utf8.RuneError)
		case r == '\t' || r == '\n' || r == '\r':
			out = append(out, byte(r))
		case r < 0x20 || r == 0x7f || unsafeRune(r):
			out = appendU(out, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// unsafeRune: the characters above ASCII that String and JSON escape.
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r == 0x2028 || r == 0x2029 ||
		r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}

// firstUnsafe is the index of the first byte of s that String escapes
// (JSON leaves a backslash alone: in JSON text it is its own escape), or
// -1: most text has none and is returned as it is.
func firstUnsafe(s string, backslash bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' && backslash {
			return i
		}
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < 0x80 {
			return i // a C0 control or DEL
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			return i
		}
		i += n
	}
	return -1
}
