package redact

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// secret has bytes that every URL escaper treats differently (space, '/',
// '+', '=', non-ASCII) so the URL forms are distinct from it and from each
// other, and its base64 encodings differ between the two alphabets.
const secret = "sk-Test/Secret+Token=42~ü ÿ?x"

func TestFormsOfKnownSecret(t *testing.T) {
	r := New("abcdefgh")
	got := r.Forms()
	// Every form here is worked out by hand from the definitions: the
	// URL escapers leave "abcdefgh" alone, so only the all-bytes
	// percent-encoding differs from it; both alphabets agree on the
	// base64, and the core at alignment 0 is the unpadded encoding minus
	// its last character, which mixes in what follows the secret.
	want := []string{
		`\u0061\u0062\u0063\u0064\u0065\u0066\u0067\u0068`, // every byte a JSON \u escape
		"%61%62%63%64%65%66%67%68",                         // every byte escaped (hex digits have no case here)
		"6162636465666768",                                 // hex
		"YWJjZGVmZ2g=",                                     // Std and URL
		"YWJjZGVmZ2g",                                      // RawStd and RawURL
		"FiY2RlZmdo",                                       // core at alignment 1 ("x" + secret → "?GFiY2RlZmdo")
		"YWJjZGVmZ2",                                       // core at alignment 0
		"hYmNkZWZna",                                       // core at alignment 2 ("xy" + secret → "???hYmNkZWZna?")
		"abcdefgh",
	}
	if len(got) != len(want) {
		t.Fatalf("Forms() = %q, want %q", got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("Forms()[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestFormsInclude(t *testing.T) {
	forms := New(secret).Forms()
	for _, tc := range []struct{ name, form string }{
		{"plain", secret},
		{"QueryEscape", url.QueryEscape(secret)},
		{"QueryEscape lower hex", lowerHex(url.QueryEscape(secret))},
		{"PathEscape", url.PathEscape(secret)},
		{"PathEscape lower hex", lowerHex(url.PathEscape(secret))},
		{"every byte", percentAll(secret)},
		{"every byte lower hex", lowerHex(percentAll(secret))},
		{"Std", base64.StdEncoding.EncodeToString([]byte(secret))},
		{"URL", base64.URLEncoding.EncodeToString([]byte(secret))},
		{"RawStd", base64.RawStdEncoding.EncodeToString([]byte(secret))},
		{"RawURL", base64.RawURLEncoding.EncodeToString([]byte(secret))},
	} {
		if !slices.ContainsFunc(forms, func(b []byte) bool { return string(b) == tc.form }) {
			t.Errorf("%s form %q missing from Forms()", tc.name, tc.form)
		}
	}
	// The lower-case forms must really differ, or the test above proves
	// nothing about them.
	if q := url.QueryEscape(secret); lowerHex(q) == q {
		t.Fatalf("test secret %q has no escape with a hex letter", secret)
	}
}

func TestFormsOrderAndDistinct(t *testing.T) {
	forms := New(secret, "Bearer "+secret, "", secret).Forms()
	for i := 1; i < len(forms); i++ {
		if len(forms[i]) > len(forms[i-1]) {
			t.Errorf("Forms()[%d] (%d bytes) is longer than Forms()[%d] (%d bytes)", i, len(forms[i]), i-1, len(forms[i-1]))
		}
		if bytes.Equal(forms[i], forms[i-1]) {
			t.Errorf("Forms() has %q twice", forms[i])
		}
	}
	// Forms returns a copy: changing it must not change the redactor.
	r := New("abcdefgh")
	r.Forms()[0][0] = 'X'
	if got := r.Forms()[0][0]; got == 'X' {
		t.Errorf("Forms() returned the redactor's own slices")
	}
}

func TestLowerHex(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"%2F", "%2f"},
		{"A%2FB%3D", "A%2fB%3d"},
		{"%25AB", "%25AB"}, // "%25" is an escaped '%': what follows is literal
		{"ABC", "ABC"},
		{"%E2%80", "%e2%80"},
	} {
		if got := lowerHex(tc.in); got != tc.want {
			t.Errorf("lowerHex(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNoCoresForShortSecrets(t *testing.T) {
	// Secrets under 6 bytes get no cores: each has the plain form, the
	// all-bytes escape and the two base64 variants (padded and not; the
	// alphabets agree for these letters).
	for _, s := range []string{"a", "ab", "abc", "abcd", "abcde"} {
		got := len(New(s).Forms())
		want := 4
		if len(s)%3 == 0 {
			want = 3 // no padding: padded and raw base64 agree
		}
		if got != want {
			t.Errorf("len(New(%q).Forms()) = %d, want %d: %q", s, got, want, New(s).Forms())
		}
	}
}

func TestCoresIgnoreNeighbours(t *testing.T) {
	// A core must appear whatever surrounds the secret, or it would miss
	// the secret inside a longer value.
	s := secret
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := range 3 {
			for _, fill := range []byte{0x00, 0xff, 'u'} {
				for after := range 3 {
					in := slices.Concat(bytes.Repeat([]byte{fill}, k), []byte(s), bytes.Repeat([]byte{^fill}, after))
					e := enc.EncodeToString(in)
					c := core(enc, s, k)
					if !strings.Contains(e, c) {
						t.Errorf("core(k=%d) %q not in encoding %q of %d×%#x + secret + %d bytes", k, c, e, k, fill, after)
					}
				}
			}
		}
	}
}

func TestBytes(t *testing.T) {
	const m = Mask
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"empty input", []string{secret}, "", ""},
		{"no secret", []string{secret}, "hello, world", "hello, world"},
		{"start", []string{secret}, secret + " tail", m + " tail"},
		{"middle", []string{secret}, "head " + secret + " tail", "head " + m + " tail"},
		{"end", []string{secret}, "head " + secret, "head " + m},
		{"whole", []string{secret}, secret, m},
		{"repeated adjacent", []string{secret}, secret + secret, m + m},
		{"repeated", []string{secret}, secret + "," + secret + "," + secret, m + "," + m + "," + m},
		{"overlapping occurrences", []string{"abcabc"}, "xabcabcabcx", "x" + m + "x"},
		{"longest of nested forms", []string{"token123", "Bearer token123"}, "Authorization: Bearer token123\r\n", "Authorization: " + m + "\r\n"},
		{"overlapping secrets", []string{"alphaBETA", "BETAgamma"}, "<alphaBETAgamma>", "<" + m + ">"},
		{"touching secrets", []string{"alpha1", "beta22"}, "alpha1beta22", m + m},
		{"multiple secrets", []string{"first-secret", "second-secret"}, "a first-secret b second-secret c", "a " + m + " b " + m + " c"},
		{"query escaped", []string{secret}, "?t=" + url.QueryEscape(secret) + "&x", "?t=" + m + "&x"},
		{"query escaped lower hex", []string{secret}, "?t=" + lowerHex(url.QueryEscape(secret)), "?t=" + m},
		{"path escaped", []string{secret}, "/a/" + url.PathEscape(secret) + "/b", "/a/" + m + "/b"},
		{"path escaped lower hex", []string{secret}, "/a/" + lowerHex(url.PathEscape(secret)) + "/b", "/a/" + m + "/b"},
		{"every byte escaped", []string{secret}, percentAll(secret), m},
		{"every byte escaped lower hex", []string{secret}, lowerHex(percentAll(secret)), m},
		{"base64 std", []string{secret}, `{"t":"` + base64.StdEncoding.EncodeToString([]byte(secret)) + `"}`, `{"t":"` + m + `"}`},
		{"base64 url", []string{secret}, base64.URLEncoding.EncodeToString([]byte(secret)), m},
		{"base64 raw std", []string{secret}, base64.RawStdEncoding.EncodeToString([]byte(secret)) + ".", m + "."},
		{"base64 raw url", []string{secret}, base64.RawURLEncoding.EncodeToString([]byte(secret)) + ".", m + "."},
		{"secret longer than input", []string{secret}, secret[:len(secret)-1], secret[:len(secret)-1]},
		{"secret cut at the end", []string{secret}, "x" + secret[:10], "x" + secret[:10]},
		{"short secret", []string{"abc"}, "xabcx YWJj", "x" + m + "x " + m},
		{"empty secret ignored", []string{"", "abc"}, "abc", m},
		{"no secrets", nil, "anything", "anything"},
		{"only empty secrets", []string{"", ""}, "anything", "anything"},
		{"mask in input", []string{secret}, m + secret + m, m + m + m},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.secrets...)
			got := r.Bytes([]byte(tc.in))
			if string(got) != tc.want {
				t.Errorf("Bytes(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got := r.String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got, want := r.Contains([]byte(tc.in)), tc.in != tc.want; got != want {
				t.Errorf("Contains(%q) = %v, want %v", tc.in, got, want)
			}
			assertNoForm(t, r, got)
		})
	}
}

func TestBytesUnchangedIsSameSlice(t *testing.T) {
	r := New(secret)
	in := []byte("nothing to see here")
	got := r.Bytes(in)
	if len(got) != len(in) || &got[0] != &in[0] {
		t.Errorf("Bytes returned a copy for input without a form")
	}
	in = []byte("x" + secret)
	orig := slices.Clone(in)
	r.Bytes(in)
	if !bytes.Equal(in, orig) {
		t.Errorf("Bytes changed its input to %q", in)
	}
}

// TestBasicAuth checks the secret inside a longer base64 value, such as an
// HTTP Basic header, at every alignment: prefixes of 0 to 5 bytes cover each
// of the three twice, and suffixes of 0 to 3 bytes every way the encoding
// can end.
func TestBasicAuth(t *testing.T) {
	for _, s := range []string{secret, "0123456789abcdef0123456789abcdef01234567", "abcdefg"} {
		r := New(s)
		for p := range 6 {
			for q := range 4 {
				value := "user:"[:p] + s + ":xyz"[:q]
				for _, enc := range []*base64.Encoding{
					base64.StdEncoding, base64.URLEncoding,
					base64.RawStdEncoding, base64.RawURLEncoding,
				} {
					in := "Authorization: Basic " + enc.EncodeToString([]byte(value)) + "\r\n"
					got := r.Bytes([]byte(in))
					if string(got) == in {
						t.Errorf("secret %q: %q passed unchanged", s, in)
						continue
					}
					assertNoForm(t, r, got)
					if leak := decodedSecret(got, s); leak != "" {
						t.Errorf("secret %q: Bytes(%q) = %q, which still decodes to %q", s, in, got, leak)
					}
				}
			}
		}
	}
}

// assertNoForm fails t if any window of out equals a form of r.
func assertNoForm(t *testing.T, r *Redactor, out []byte) {
	t.Helper()
	for _, f := range r.Forms() {
		if bytes.Contains(out, f) {
			t.Errorf("output %q still contains form %q", out, f)
		}
	}
}

// decodedSecret base64-decodes every run of base64 characters in out, at
// every starting character and in both alphabets, and returns the decoded
// text of the first run that contains secret, or "".
func decodedSecret(out []byte, secret string) string {
	isB64 := func(c byte) bool {
		return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '+' || c == '/' || c == '-' || c == '_'
	}
	for i := 0; i < len(out); {
		if !isB64(out[i]) {
			i++
			continue
		}
		j := i
		for j < len(out) && isB64(out[j]) {
			j++
		}
		run := out[i:j]
		i = j
		for off := range 4 {
			if off >= len(run) {
				break
			}
			part := run[off:]
			if len(part)%4 == 1 {
				part = part[:len(part)-1] // a lone character encodes no byte
			}
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				dec, err := enc.DecodeString(string(part))
				if err == nil && bytes.Contains(dec, []byte(secret)) {
					return string(dec)
				}
			}
		}
	}
	return ""
}

func TestDecodedSecretFindsLeak(t *testing.T) {
	// The leak detector used above must itself work: an unredacted Basic
	// header at each alignment decodes to the secret.
	for p := range 6 {
		in := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"[:p]+secret))
		if decodedSecret([]byte(in), secret) == "" {
			t.Errorf("decodedSecret(%q) found nothing", in)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	// A Redactor is shared by every request of a credential; run with
	// -race this catches any hidden mutation.
	r := New(secret)
	in := []byte("a " + secret + " b")
	want := "a " + Mask + " b"
	done := make(chan string)
	for range 8 {
		go func() {
			var got string
			for range 100 {
				got = string(r.Bytes(in))
				r.Contains(in)
				r.Forms()
			}
			done <- got
		}()
	}
	for range 8 {
		if got := <-done; got != want {
			t.Errorf("Bytes(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMixedCaseEscapes: an escaper may write the hex digits of one value
// in any mix of cases ("%2f" beside "%2B"); every mix is redacted, and a
// near miss (one escape's digit changed) is not.
func TestMixedCaseEscapes(t *testing.T) {
	r := New(secret)
	for _, e := range []string{url.QueryEscape(secret), url.PathEscape(secret), percentAll(secret)} {
		mixed := mixHex(e)
		if mixed == e || mixed == lowerHex(e) {
			t.Fatalf("%q: no mixed form to test", e)
		}
		if got := r.String("<" + mixed + ">"); got != "<"+Mask+">" {
			t.Errorf("%q: got %q", mixed, got)
		}
		var out bytes.Buffer
		w := r.Writer(&out)
		for i := 0; i < len(mixed); i++ {
			w.Write([]byte{mixed[i]})
		}
		w.Close()
		if out.String() != Mask {
			t.Errorf("%q streamed a byte at a time: got %q", mixed, out.String())
		}
	}
	near := []byte(percentAll(secret))
	near[len(near)-1] = '0' + (near[len(near)-1]-'0'+1)%10
	if r.Contains(near) {
		t.Errorf("a near miss %q was redacted", near)
	}
}
