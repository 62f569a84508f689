package redact

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// streamInputs are the inputs the streaming tests split every way.
func streamInputs() []string {
	b64 := base64.StdEncoding.EncodeToString([]byte("user:" + secret))
	return []string{
		"",
		"x",
		"no secret here at all",
		secret,
		secret + secret,
		"head " + secret + " middle " + url.QueryEscape(secret) + " tail",
		"Basic " + b64 + "\r\n",
		secret[:len(secret)-1],                  // cut short: must come out unchanged
		secret[:5] + secret + secret[:5],        // a false start right before a match
		"Bearer " + secret + "Bearer " + secret, // nested forms of two secrets
		strings.Repeat("s", 50) + secret,
	}
}

// fake is an io.Writer whose behaviour a test sets.
type fake struct {
	write func(p []byte) (int, error)
}

func (f *fake) Write(p []byte) (int, error) { return f.write(p) }

var _ io.Writer = (*fake)(nil)

// streamed writes in to a Writer in the given pieces, calling Flush after
// the pieces whose index is in flushAfter, and returns what reached the
// underlying writer.
func streamed(t *testing.T, r *Redactor, pieces []string, flushAfter map[int]bool) string {
	t.Helper()
	var out bytes.Buffer
	w := r.Writer(&out)
	for i, p := range pieces {
		n, err := w.Write([]byte(p))
		if n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", p, n, err, len(p))
		}
		if held := len(w.buf); held >= max(r.maxLen, 1) {
			t.Fatalf("after Write(%q) the writer holds %d bytes, want < %d", p, held, r.maxLen)
		}
		if flushAfter[i] {
			if err := w.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.String()
}

func TestWriterEverySplit(t *testing.T) {
	r := New(secret, "Bearer "+secret)
	for _, in := range streamInputs() {
		want := string(r.Bytes([]byte(in)))
		for k := 0; k <= len(in); k++ {
			for _, flush := range []bool{false, true} {
				got := streamed(t, r, []string{in[:k], in[k:]}, map[int]bool{0: flush})
				if got != want {
					t.Errorf("split %q at %d (flush %v): got %q, want %q", in, k, flush, got, want)
				}
			}
		}
	}
}

func TestWriterByteAtATime(t *testing.T) {
	r := New(secret, "Bearer "+secret)
	for _, in := range streamInputs() {
		want := string(r.Bytes([]byte(in)))
		pieces := strings.Split(in, "")
		if got := streamed(t, r, pieces, nil); got != want {
			t.Errorf("%q one byte at a time: got %q, want %q", in, got, want)
		}
		all := map[int]bool{}
		for i := range pieces {
			all[i] = true
		}
		if got := streamed(t, r, pieces, all); got != want {
			t.Errorf("%q one byte at a time with Flush after each: got %q, want %q", in, got, want)
		}
	}
}

func TestWriterRandomChunks(t *testing.T) {
	r := New(secret, "Bearer "+secret)
	rng := rand.New(rand.NewPCG(1, 2))
	// One long input with occurrences of every form and noise between
	// them, so chunk boundaries land everywhere.
	var b strings.Builder
	for range 200 {
		b.WriteString(strings.Repeat("-", rng.IntN(70)))
		forms := r.Forms()
		b.Write(forms[rng.IntN(len(forms))])
	}
	in := b.String()
	want := string(r.Bytes([]byte(in)))
	for range 50 {
		var pieces []string
		flush := map[int]bool{}
		for rest := in; rest != ""; {
			n := min(1+rng.IntN(100), len(rest))
			if rng.IntN(4) == 0 {
				flush[len(pieces)] = true
			}
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		if got := streamed(t, r, pieces, flush); got != want {
			t.Fatalf("random chunks: got %q, want %q", got, want)
		}
	}
}

func TestWriterFlushHoldsOnlyFormPrefix(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"nothing to hold", "hello ", "hello "},
		{"start of the secret held", "hello " + secret[:5], "hello "},
		{"start of an escaped form held", "a=" + url.QueryEscape(secret)[:12], "a="},
		{"whole secret at the end is redacted", "hello " + secret, "hello " + Mask},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := New(secret).Writer(&out)
			if _, err := w.Write([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("after Write(%q) and Flush: got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestWriterBounded(t *testing.T) {
	r := New(secret)
	var out bytes.Buffer
	w := r.Writer(&out)
	in := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB in one Write
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if got, limit := len(w.buf), r.maxLen-1; got > limit {
		t.Errorf("holds %d bytes after a 1 MiB Write, want at most %d", got, limit)
	}
	if got, limit := cap(w.buf), chunk+r.maxLen; got > limit {
		t.Errorf("buffer capacity %d after a 1 MiB Write, want at most %d", got, limit)
	}
	if got, want := out.Len(), len(in)-len(w.buf); got != want {
		t.Errorf("wrote %d bytes before Close, want %d", got, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("output differs from input without a secret")
	}
}

func TestWriterNoForms(t *testing.T) {
	var out bytes.Buffer
	w := New().Writer(&out)
	for _, p := range []string{"a", "bc", ""} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	// With nothing to redact nothing needs holding back.
	if got, want := out.String(), "abc"; got != want {
		t.Errorf("before Close: got %q, want %q", got, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWriterAfterClose(t *testing.T) {
	var out bytes.Buffer
	w := New(secret).Writer(&out)
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if n, err := w.Write([]byte("x")); n != 0 || !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %d, %v; want 0, ErrClosed", n, err)
	}
	if err := w.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	if got, want := out.String(), "abc"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestWriterUnderlyingErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		write   func(p []byte) (int, error)
		wantErr error
	}{
		{"error", func(p []byte) (int, error) { return 0, boom }, boom},
		{"short write", func(p []byte) (int, error) { return len(p) - 1, nil }, io.ErrShortWrite},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := New(secret).Writer(&fake{write: tc.write})
			// More than the writer holds back (under the longest
			// form, the secret's \u escapes: six bytes each).
			in := strings.Repeat("z", 1000)
			if _, err := w.Write([]byte(in)); !errors.Is(err, tc.wantErr) {
				t.Errorf("Write = %v, want %v", err, tc.wantErr)
			}
			// The stream is broken: later calls report the same error
			// rather than write output with a gap in it.
			if _, err := w.Write([]byte("more")); !errors.Is(err, tc.wantErr) {
				t.Errorf("second Write = %v, want %v", err, tc.wantErr)
			}
			if err := w.Flush(); !errors.Is(err, tc.wantErr) {
				t.Errorf("Flush = %v, want %v", err, tc.wantErr)
			}
			if err := w.Close(); !errors.Is(err, tc.wantErr) {
				t.Errorf("Close = %v, want %v", err, tc.wantErr)
			}
		})
	}
}
