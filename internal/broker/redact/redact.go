package redact

import (
	"slices"
)

// Mask replaces each redacted occurrence.
const Mask = "[REDACTED]"

// Redactor replaces the forms of a set of secrets with [Mask]. It is
// immutable after [New] and safe for concurrent use.
type Redactor struct {
	// forms holds every distinct form, longest first.
	forms []form
	// byFirst lists, for each byte value, the indexes into forms of the
	// forms starting with it, longest first.
	byFirst [256][]int
	// pairs has bit a<<8|b set when some form starts with the bytes a, b,
	// or is the single byte a. Most positions of ordinary data fail this
	// test, which keeps the scan near one table look-up per byte.
	pairs [1 << 16 / 64]uint64
	// maxLen is the length of the longest form, 0 without forms.
	maxLen int
}

// New builds a redactor for the given secrets. Pass every value in which
// the secret leaves the host, for example both the raw token and the whole
// header value "Bearer " + token, so that the encodings of each are
// redacted. Empty secrets are ignored.
func New(secrets ...string) *Redactor {
	r := &Redactor{forms: collect(secrets)}
	for i, fm := range r.forms {
		f := fm.b
		r.byFirst[f[0]] = append(r.byFirst[f[0]], i)
		switch {
		case len(f) == 1:
			for b := range 256 {
				r.setPair(f[0], byte(b))
			}
		case fm.fold && foldAt(f, 1):
			// An escape's first hex digit, in either case.
			r.setPair(f[0], toLower(f[1]))
			r.setPair(f[0], toUpper(f[1]))
		default:
			r.setPair(f[0], f[1])
		}
		r.maxLen = max(r.maxLen, len(f))
	}
	return r
}

func (r *Redactor) setPair(a, b byte) {
	p := uint(a)<<8 | uint(b)
	r.pairs[p/64] |= 1 << (p % 64)
}

// Forms returns every byte string that is redacted, longest first. Tests use
// it, and so can a host-side self-check that the secret does not appear in
// what is about to be sent to a sandbox. The result is a copy.
func (r *Redactor) Forms() [][]byte {
	out := make([][]byte, len(r.forms))
	for i, f := range r.forms {
		out[i] = slices.Clone(f.b)
	}
	return out
}

// Bytes returns b with every occurrence of every form replaced by [Mask].
// When nothing matched it returns b itself, not a copy; otherwise it returns
// a new slice and leaves b unchanged.
func (r *Redactor) Bytes(b []byte) []byte {
	out, _ := r.redact(b)
	return out
}

// String is [Redactor.Bytes] for strings. It returns s itself when nothing
// matched.
func (r *Redactor) String(s string) string {
	out, changed := r.redact([]byte(s))
	if !changed {
		return s
	}
	return string(out)
}

// redact implements Bytes and reports whether anything was replaced.
func (r *Redactor) redact(b []byte) ([]byte, bool) {
	first := r.index(b)
	if first < 0 {
		return b, false
	}
	out := make([]byte, 0, len(b)+len(Mask))
	out = append(out, b[:first]...)
	out, _, _ = r.scan(out, b, first, 0, len(b), true)
	return out, true
}

// Contains reports whether b holds any form. The broker uses it to refuse
// values, such as placeholders supplied by a sandbox, that would carry the
// secret.
func (r *Redactor) Contains(b []byte) bool {
	return r.index(b) >= 0
}

// index returns the position of the first occurrence of any form in b, or
// -1.
func (r *Redactor) index(b []byte) int {
	for i := 0; ; i++ {
		if i = r.candidate(b, i, len(b)); i == len(b) {
			return -1
		}
		if n, _ := r.matchAt(b, i, true); n > 0 {
			return i
		}
	}
}

// candidate returns the first position in [i, limit) where a form could
// start, going by the first two bytes, or limit. This loop is where nearly
// all the time goes, so it does as little as possible per byte.
func (r *Redactor) candidate(data []byte, i, limit int) int {
	// The last byte of data has no pair; matchAt decides it alone.
	stop := min(limit, len(data)-1)
	for ; i < stop; i++ {
		p := uint(data[i])<<8 | uint(data[i+1])
		if r.pairs[p/64]&(1<<(p%64)) != 0 {
			return i
		}
	}
	return min(i, limit)
}

// matchAt returns the length of the longest form that occurs at data[i:],
// or 0 when none does. It compares data with each form sharing the first
// byte, so input that keeps almost matching costs up to the length of the
// forms per position; building such input takes knowing the secret. When final is false, data may continue beyond its
// end, and ok is false if the answer could still change: some form longer
// than data[i:] starts with it. When final is true, ok is always true.
func (r *Redactor) matchAt(data []byte, i int, final bool) (n int, ok bool) {
	rest := data[i:]
	if len(rest) >= 2 {
		p := uint(rest[0])<<8 | uint(rest[1])
		if r.pairs[p/64]&(1<<(p%64)) == 0 {
			return 0, true
		}
	}
	for _, fi := range r.byFirst[rest[0]] {
		f := r.forms[fi]
		if len(f.b) > len(rest) {
			// A longer form could still match once more data
			// arrives; deciding now could leave its tail unredacted.
			if !final && equalFold(rest, form{b: f.b[:len(rest)], fold: f.fold}) {
				return 0, false
			}
			continue
		}
		// Forms are tried longest first, so the first that matches
		// covers the most.
		if equalFold(rest[:len(f.b)], f) {
			return len(f.b), true
		}
	}
	return 0, true
}

// scan decides the positions of data from i up to limit in order, appending
// the output for them to out. end is the end (exclusive, relative to data)
// of the redacted run in progress, or at most i if none is. Unless final,
// scan stops early at the first position whose outcome depends on bytes
// after data. It returns the extended output, the first position not
// decided and the new end of the run; every byte before that position has
// been either appended or replaced.
//
// A match starting inside the run in progress extends it, so overlapping
// occurrences become one Mask and no fragment of a secret is left between
// two masks. A match starting at or after the run's end starts a new Mask.
func (r *Redactor) scan(out, data []byte, i, end, limit int, final bool) ([]byte, int, int) {
	lit := i // data[max(lit, end):i] is pending literal output
	for ; i < limit; i++ {
		if i = r.candidate(data, i, limit); i == limit {
			break
		}
		n, ok := r.matchAt(data, i, final)
		if !ok {
			break
		}
		if n == 0 {
			continue
		}
		if i >= end {
			out = append(out, data[max(lit, end):i]...)
			out = append(out, Mask...)
			lit = i + n
			end = i + n
		} else {
			end = max(end, i+n)
		}
	}
	if from := max(lit, end); from < i {
		out = append(out, data[from:i]...)
	}
	return out, i, end
}
