package redact

import (
	"bytes"
	"encoding/base64"
	"hash/fnv"
	"math/rand/v2"
	"net/url"
	"slices"
	"testing"
)

// reference redacts data the slow, obvious way: find every occurrence of
// every form, merge the ones that overlap, and replace each merged range
// with Mask. It returns the output and, in output coordinates, where each
// Mask was put.
func reference(forms []form, data []byte) (out []byte, masks [][2]int) {
	type span struct{ start, end int }
	var spans []span
	for _, f := range forms {
		for i := 0; i+len(f.b) <= len(data); i++ {
			if referenceEqual(data[i:i+len(f.b)], f) {
				spans = append(spans, span{i, i + len(f.b)})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.start < merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, s.end)
			continue
		}
		merged = append(merged, s)
	}
	pos := 0
	for _, s := range merged {
		out = append(out, data[pos:s.start]...)
		masks = append(masks, [2]int{len(out), len(out) + len(Mask)})
		out = append(out, Mask...)
		pos = s.end
	}
	return append(out, data[pos:]...), masks
}

// referenceEqual compares the obvious way: a folded form's escapes are
// compared with their hex digits in upper case.
func referenceEqual(data []byte, f form) bool {
	if !f.fold {
		return bytes.Equal(data, f.b)
	}
	up := func(b []byte) []byte {
		c := slices.Clone(b)
		for j := range c {
			if j >= 1 && f.b[j-1] == '%' || j >= 2 && f.b[j-2] == '%' {
				c[j] = bytes.ToUpper(c[j : j+1])[0]
			}
		}
		return c
	}
	return bytes.Equal(up(data), up(f.b))
}

// FuzzRedact checks Bytes against the reference, that no form survives
// except where Mask itself supplies some of its bytes, and that the Writer
// gives the same output for any chunking and any Flush calls. The secret
// argument is split at NUL bytes into up to four secrets, so overlapping
// forms of different secrets are exercised too.
func FuzzRedact(f *testing.F) {
	b64 := base64.StdEncoding.EncodeToString
	for _, seed := range []struct{ secret, data string }{
		{secret, "head " + secret + " tail"},
		{secret, url.QueryEscape(secret) + lowerHex(url.PathEscape(secret))},
		{secret, "x" + mixHex(url.QueryEscape(secret)) + "y" + mixHex(percentAll(secret))},
		{secret, "Basic " + b64([]byte("user:"+secret))},
		{secret, "Basic " + b64([]byte("us"+secret+"x"))},
		{secret + "\x00Bearer " + secret, "Bearer " + secret + secret},
		{"abcabc", "abcabcabcab"},
		{"alphaBETA\x00BETAgamma", "alphaBETAgamma"},
		{"D]", "D]x[REDACTED]"},
		{"a", "aaaa"},
		{"", "data"},
		{"abcdefgh", ""},
	} {
		f.Add([]byte(seed.secret), []byte(seed.data))
	}
	f.Fuzz(func(t *testing.T, secretArg, data []byte) {
		var secrets []string
		for _, s := range bytes.SplitN(secretArg, []byte{0}, 4) {
			secrets = append(secrets, string(s))
		}
		r := New(secrets...)
		forms := r.Forms()
		in := slices.Clone(data)

		got := r.Bytes(data)
		if !bytes.Equal(data, in) {
			t.Fatalf("Bytes changed its input")
		}
		want, masks := reference(r.forms, data)
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %q: Bytes(%q) = %q, reference gives %q", secrets, data, got, want)
		}

		// A form may reappear in the output only by taking some of
		// its bytes from a Mask (the secret "D]" and the input "D]x"
		// give "[REDACTED]x"); that reveals nothing the reader did not
		// know. Every byte of a form lying wholly in the input's own
		// text must have been replaced.
		for _, f := range forms {
			for i := 0; i+len(f) <= len(got); i++ {
				if !bytes.Equal(got[i:i+len(f)], f) {
					continue
				}
				if !slices.ContainsFunc(masks, func(m [2]int) bool { return i < m[1] && m[0] < i+len(f) }) {
					t.Fatalf("secrets %q: output %q has form %q at %d outside any mask", secrets, got, f, i)
				}
			}
		}

		if len(masks) == 0 {
			if r.Contains(data) {
				t.Fatalf("Contains(%q) = true but nothing was redacted", data)
			}
			if len(got) != len(data) || len(data) > 0 && &got[0] != &data[0] {
				t.Fatalf("Bytes(%q) = %q, want the input slice itself", data, got)
			}
		} else if !r.Contains(data) {
			t.Fatalf("Contains(%q) = false but Bytes redacted it", data)
		}
		if s := r.String(string(data)); s != string(want) {
			t.Fatalf("String(%q) = %q, want %q", data, s, want)
		}

		// Chunk sizes and Flush calls come from a generator seeded
		// with the input, so a failure reproduces.
		h := fnv.New64a()
		h.Write(secretArg)
		h.Write(data)
		rng := rand.New(rand.NewPCG(h.Sum64(), 0))
		var out bytes.Buffer
		w := r.Writer(&out)
		for rest := data; len(rest) > 0; {
			n := min(rng.IntN(2*r.maxLen+2)+1, len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
			if len(w.buf) >= max(r.maxLen, 1) {
				t.Fatalf("writer holds %d bytes, longest form is %d", len(w.buf), r.maxLen)
			}
			if rng.IntN(3) == 0 {
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("secrets %q: streaming %q gave %q, Bytes gives %q", secrets, data, out.Bytes(), want)
		}
	})
}

// mixHex returns a percent-encoding with the hex digits of its escapes in
// alternating case.
func mixHex(e string) string {
	b := []byte(e)
	k := 0
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			for _, j := range []int{i + 1, i + 2} {
				if k%2 == 0 {
					b[j] = toLower(b[j])
				} else {
					b[j] = toUpper(b[j])
				}
				k++
			}
			i += 2
		}
	}
	return string(b)
}
