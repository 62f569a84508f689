package redact

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// benchSecret is a typical 40-byte API token.
const benchSecret = "ghp_4f9K2mQ7xR1vT8bN3cL6pZ0wY5sH2jD9aE7u"

// benchInput returns 1 MiB of printable JSON-like text with n occurrences
// of forms of the secret spread through it.
func benchInput(r *Redactor, n int) []byte {
	rng := rand.New(rand.NewPCG(7, 7))
	const alphabet = `abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "{}:,._-/+=`
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	forms := r.Forms()
	for i := range n {
		f := forms[i%len(forms)]
		copy(b[rng.IntN(len(b)-len(f)):], f)
	}
	return b
}

// replaceAll is the peer: what one would write without this package,
// bytes.ReplaceAll once per form, longest first. It is not a correct
// redactor (a shorter form can match across the Mask of a longer one, and
// overlapping occurrences leave fragments), but it is the obvious baseline
// for speed.
func replaceAll(forms [][]byte, b []byte) []byte {
	for _, f := range forms {
		b = bytes.ReplaceAll(b, f, []byte(Mask))
	}
	return b
}

// BenchmarkRedact1MiB redacts 1 MiB with one 40-byte secret, passed as the
// broker would: the token and its header value "Bearer " + token (the
// "forms" metric says how many that makes). It interleaves each case with
// the peer so both see the same machine state, and reports the medians and
// the ratio to the peer.
func BenchmarkRedact1MiB(b *testing.B) {
	r := New(benchSecret, "Bearer "+benchSecret)
	forms := r.Forms()
	for _, bc := range []struct {
		name string
		hits int
		run  func(in []byte)
	}{
		{"Bytes/clean", 0, func(in []byte) { r.Bytes(in) }},
		{"Bytes/100-hits", 100, func(in []byte) { r.Bytes(in) }},
		{"Writer-32KiB/clean", 0, func(in []byte) {
			w := r.Writer(io.Discard)
			for c := range slices.Chunk(in, 32<<10) {
				w.Write(c)
			}
			w.Close()
		}},
		{"Writer-32KiB-Flush/100-hits", 100, func(in []byte) {
			w := r.Writer(io.Discard)
			for c := range slices.Chunk(in, 32<<10) {
				w.Write(c)
				w.Flush()
			}
			w.Close()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := benchInput(r, bc.hits)
			var ours, peer []time.Duration
			for b.Loop() {
				t0 := time.Now()
				bc.run(in)
				t1 := time.Now()
				replaceAll(forms, in)
				t2 := time.Now()
				ours = append(ours, t1.Sub(t0))
				peer = append(peer, t2.Sub(t1))
			}
			mo, mp := median(ours), median(peer)
			b.ReportMetric(float64(mo.Microseconds()), "median-µs")
			b.ReportMetric(float64(mp.Microseconds()), "ReplaceAll-median-µs")
			b.ReportMetric(float64(mo)/float64(mp), "x-ReplaceAll")
			b.ReportMetric(float64(len(forms)), "forms")
		})
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
