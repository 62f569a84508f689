package units

import (
	"strconv"
	"testing"
	"time"
)

// seeds are interesting inputs shared by all fuzzers.
var seeds = []string{
	"", " ", "0", "1", "-1", "+5", "1e3", "0x10", ".5MiB", "1.MiB", "1.5GiB",
	"8EiB", "9223372036854775807", "9223372036854775808", "12XB", "1 KiB",
	"1  KiB", "NaN", "Inf", "1m30s", "250ms", "2h", "1.5", "500m", "1024",
	"0.0005", "1h1h1h", "10µs", "\x00", "1\x00", "1.5.5", "..", "1kıb",
}

func FuzzParseSize(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseSize(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, want >= 0", s, n)
		}
		f := FormatSize(n)
		back, err := ParseSize(f)
		if err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d", n, f, back, err, n)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, want >= 0", s, d)
		}
		// Duration.String is an exact Go duration, so it must re-parse
		// to the same value.
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; re-parsing %q gave %v, %v", s, d, d.String(), back, err)
		}
		// When the standard library also accepts the input and the value
		// is a whole number of seconds, they must agree (time.ParseDuration
		// is inexact for some fractions, so only compare the easy cases).
		if want, err := time.ParseDuration(s); err == nil && d%time.Second == 0 && want%time.Second == 0 && want != d {
			t.Fatalf("ParseDuration(%q) = %v; time.ParseDuration says %v", s, d, want)
		}
	})
}

func FuzzParseCPU(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseCPU(s)
		if err != nil {
			return
		}
		if m <= 0 || m > MaxCPU {
			t.Fatalf("ParseCPU(%q) = %d, want 1..%d", s, m, MaxCPU)
		}
		back, err := ParseCPU(strconv.FormatInt(m, 10) + "m")
		if err != nil || back != m {
			t.Fatalf("ParseCPU(%q) = %d; re-parsing as millicores gave %d, %v", s, m, back, err)
		}
	})
}
