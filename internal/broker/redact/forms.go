package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

const (
	// minCoreChars is the shortest base64 core kept. A core is an
	// unanchored run of base64 characters; a short one (say 4 characters,
	// 24 bits) would turn up by chance in large base64 payloads such as
	// images and corrupt them, while 8 characters carry 48 bits of the
	// secret.
	minCoreChars = 8

	// minCoreSecret is the shortest secret that gets cores. A 5-byte
	// secret has at most 6 characters that depend on it alone, fewer than
	// minCoreChars, so the cores would all be dropped anyway; the explicit
	// bound keeps that rule visible.
	minCoreSecret = 6
)

// form is one byte string to redact. A folded form's hex digits after
// each '%' match in either case: it is a percent-encoding, and an escaper
// may write any mix of "%2f" and "%2F".
type form struct {
	b    []byte
	fold bool
}

// formsOf returns the byte strings to redact for one non-empty secret, in no
// particular order and possibly with duplicates, and the percent-encodings
// among them (folded).
func formsOf(s string) (forms, folded []string) {
	forms = []string{s}

	// URL encodings. An upstream that puts the secret into a Location
	// header or a link escapes it, with upper- or lower-case hex digits,
	// or both in one value.
	for _, e := range []string{url.QueryEscape(s), url.PathEscape(s), percentAll(s)} {
		if strings.IndexByte(e, '%') >= 0 {
			folded = append(folded, e, lowerHex(e))
		} else {
			forms = append(forms, e)
		}
	}

	// JSON string escapes: an upstream's encoder may escape "/" as "\/",
	// and "<", ">" and "&" as \u003c and so on (Go's, by default).
	forms = append(forms, jsonEscape(s, false), jsonEscape(s, true))
	if len(s) >= minCoreSecret {
		// Hex in both cases (a debugging echo, a signature input), and
		// every character as a \u00XX escape in both cases. Not for a
		// short secret: its hex is a few digits that innocent data
		// holds everywhere.
		h := hex.EncodeToString([]byte(s))
		forms = append(forms, h, strings.ToUpper(h), uEscapeAll(s, false), uEscapeAll(s, true))
	}

	// Whole base64 encodings, for an upstream that echoes an encoded
	// header or stores the token encoded in a JSON field; and of the
	// URL-encoded secret, which an upstream that encodes a query string
	// or a form body as a whole produces.
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.URLEncoding,
		base64.RawStdEncoding, base64.RawURLEncoding,
	} {
		forms = append(forms, enc.EncodeToString([]byte(s)))
		if q := url.QueryEscape(s); q != s {
			forms = append(forms, enc.EncodeToString([]byte(q)))
		}
	}

	// Base64 cores: the secret inside a longer encoded value ("user:" +
	// secret in HTTP Basic, a JSON document encoded as a whole) is
	// encoded at one of three alignments and its first and last
	// characters mix with the neighbouring bytes, so the whole encodings
	// above do not appear. The characters that depend on the secret alone
	// do, and redacting them leaves at most a few bits of the secret at
	// each end.
	if len(s) >= minCoreSecret {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for k := range 3 {
				if c := core(enc, s, k); len(c) >= minCoreChars {
					forms = append(forms, c)
				}
			}
		}
	}
	return forms, folded
}

// core returns the characters of enc's encoding of k filler bytes followed
// by s that depend only on bytes of s. Character i of an encoding stands
// for bits [6i, 6i+6) of the input, so it is kept when those bits lie within
// s, that is within [8k, 8(k+len(s))).
func core(enc *base64.Encoding, s string, k int) string {
	in := make([]byte, k+len(s))
	copy(in[k:], s)
	e := enc.EncodeToString(in)
	first := (8*k + 5) / 6       // first character with no filler bit
	last := 8 * (k + len(s)) / 6 // characters [first, last) lie wholly within s
	if last <= first {
		return ""
	}
	return e[first:last]
}

// jsonEscape returns s as the inside of a JSON string, with "/" escaped as
// "\/" when slash is set, and "<", ">", "&" as \u003c, \u003e, \u0026
// (what Go's encoder writes by default).
func jsonEscape(s string, slash bool) string {
	b, _ := json.Marshal(s)
	e := string(b[1 : len(b)-1])
	if slash {
		e = strings.ReplaceAll(e, "/", `\/`)
	}
	return e
}

// uEscapeAll returns s with every byte written as a \u00XX escape, hex in
// upper or lower case.
func uEscapeAll(s string, upper bool) string {
	digits := "0123456789abcdef"
	if upper {
		digits = "0123456789ABCDEF"
	}
	b := make([]byte, 0, 6*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, '\\', 'u', '0', '0', digits[s[i]>>4], digits[s[i]&15])
	}
	return string(b)
}

// percentAll returns s with every byte percent-encoded in upper-case hex.
func percentAll(s string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, 3*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, '%', hex[s[i]>>4], hex[s[i]&15])
	}
	return string(b)
}

// lowerHex returns a percent-encoded string with the hex digits of each
// escape in lower case. Only escapes are touched: every '%' in an escaper's
// output starts one, since a literal '%' is itself escaped as "%25".
func lowerHex(e string) string {
	b := []byte(e)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = toLower(b[i+1])
			b[i+2] = toLower(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func toUpper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

func toLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// collect returns the distinct forms of all non-empty secrets, longest
// first and, among equal lengths, in byte order so the result does not
// depend on the order of the secrets. A byte string that is a folded form
// of one secret and a plain one of another is kept folded (it matches
// more).
func collect(secrets []string) []form {
	var all []form
	for _, s := range secrets {
		if s == "" {
			// An empty form would match everywhere and redact
			// everything.
			continue
		}
		forms, folded := formsOf(s)
		for _, f := range forms {
			all = append(all, form{b: []byte(f)})
		}
		for _, f := range folded {
			all = append(all, form{b: []byte(f), fold: true})
		}
	}
	slices.SortFunc(all, func(a, b form) int {
		if len(a.b) != len(b.b) {
			return len(b.b) - len(a.b)
		}
		if c := bytes.Compare(a.b, b.b); c != 0 {
			return c
		}
		switch {
		case a.fold == b.fold:
			return 0
		case a.fold:
			return -1
		}
		return 1
	})
	return slices.CompactFunc(all, func(a, b form) bool { return bytes.Equal(a.b, b.b) })
}

// foldAt reports whether byte j of folded form f is a hex digit of an
// escape: one of the two bytes after a '%'. Every '%' of an escaper's
// output starts an escape (a literal '%' is "%25").
func foldAt(f []byte, j int) bool {
	return j >= 1 && f[j-1] == '%' || j >= 2 && f[j-2] == '%'
}

// equalFold reports whether data equals form f, its escapes' hex digits
// compared in either case when f is folded.
func equalFold(data []byte, f form) bool {
	if !f.fold {
		return bytes.Equal(data, f.b)
	}
	if len(data) != len(f.b) {
		return false
	}
	for j, c := range f.b {
		if d := data[j]; d != c && !(foldAt(f.b, j) && toLower(d) == toLower(c)) {
			return false
		}
	}
	return true
}
