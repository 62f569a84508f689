package units

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDurationValid(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"0.000", 0},
		{"30", 30 * time.Second},
		{"1.5", 1500 * time.Millisecond},
		{".5", 500 * time.Millisecond},
		{"2.", 2 * time.Second},
		{"0.000000001", time.Nanosecond},
		{"0.0000000019", time.Nanosecond}, // rounds down
		{"1m30s", 90 * time.Second},
		{"250ms", 250 * time.Millisecond},
		{"2h", 2 * time.Hour},
		{"1.5h", 90 * time.Minute},
		{"1h1h", 2 * time.Hour},
		{"1h2m3s4ms5us6ns", time.Hour + 2*time.Minute + 3*time.Second + 4*time.Millisecond + 5*time.Microsecond + 6},
		{"10µs", 10 * time.Microsecond},
		{"10μs", 10 * time.Microsecond},
		{"1.5ns", time.Nanosecond},
		{"0.3333333333s", 333333333},
		{"0.1h", 6 * time.Minute},
		{"  1m  ", time.Minute},
		{"9223372036.854775807", math.MaxInt64},
		{"9223372036854775807ns", math.MaxInt64},
		{"2562047h47m16.854775807s", math.MaxInt64},
		{"2562047h", 2562047 * time.Hour},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDurationInvalid(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"", `invalid duration "": empty value`},
		{"-1", `invalid duration "-1": negative values are not allowed`},
		{"-1s", "negative"},
		{"+5s", "a sign is not allowed"},
		{"+5", "a sign is not allowed"},
		{"abc", `invalid duration "abc": not a number; use seconds ("30", "1.5") or a Go duration ("1m30s", "250ms", "2h")`},
		{"NaN", "NaN and infinity"},
		{"Inf", "NaN and infinity"},
		{"+Inf", "a sign is not allowed"},
		{"1e3", "exponents are not allowed"},
		{"0x10", "hexadecimal is not allowed"},
		{"1_000", "digit separators"},
		{"1..5s", "more than one decimal point"},
		{".", "expected digits after the decimal point"},
		{".s", "expected digits after the decimal point"},
		{"s", "not a number"},
		{"1m30", "missing unit"},
		{"1x", `unknown unit "x" (use ns, us, ms, s, m, h)`},
		{"1S", `unknown unit "S"`},
		{"1H", `unknown unit "H"`},
		{"1d", `unknown unit "d"`},
		{"1 s", "white space is not allowed"},
		{"1m 30s", "white space is not allowed"},
		{"1s-1s", `unknown unit "s-"`},
		{"1s.", `expected a number at "."`},
		{"0.1ns", "too small"},
		{"0.0000000001", "too small"},
		{"9223372037", "too large"},
		{"9223372036.854775808", "too large"},
		{"9223372036854775808ns", "too large"},
		{"2562048h", "too large"},
		{"2562047h47m16.854775808s", "too large"},
		{"99999999999999999999999h", "too large"},
		{strings.Repeat("1h", 200), "too long"},
		{strings.Repeat("9", 100) + "h" + strings.Repeat("1h", 60), "too large"},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, nil; want error containing %q", tt.in, got, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseDuration(%q) error = %q; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}

// TestParseDurationMatchesTime checks that for inputs both accept,
// ParseDuration agrees with time.ParseDuration where the latter is exact.
func TestParseDurationMatchesTime(t *testing.T) {
	for _, in := range []string{"1h", "1m30s", "250ms", "1h2m3s4ms5us6ns", "100000h", "3us", "0s", "1.5s", "1.25m"} {
		want, err := time.ParseDuration(in)
		if err != nil {
			t.Fatalf("time.ParseDuration(%q): %v", in, err)
		}
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
