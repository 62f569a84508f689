package units

import (
	"math"
	"strings"
	"testing"
)

func TestParseSizeValid(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"1048576", 1 << 20},
		{"007", 7},
		{"0B", 0},
		{"100B", 100},
		{"100b", 100},
		{"1K", 1024},
		{"1k", 1024},
		{"1Ki", 1024},
		{"1KiB", 1024},
		{"1kib", 1024},
		{"1KIB", 1024},
		{"1KB", 1000},
		{"1kb", 1000},
		{"64MiB", 64 << 20},
		{"64M", 64 << 20},
		{"64MB", 64e6},
		{"1.5GiB", 3 << 29},
		{"1.5KiB", 1536},
		{"2GiB", 2 << 30},
		{"2G", 2 << 30},
		{"2GB", 2e9},
		{"1TiB", 1 << 40},
		{"1TB", 1e12},
		{"1PiB", 1 << 50},
		{"1PB", 1e15},
		{"1EiB", 1 << 60},
		{"1EB", 1e18},
		{"512 KiB", 512 << 10},
		{"512 k", 512 << 10},
		{"  64MiB  ", 64 << 20},
		{"\t64MiB\n", 64 << 20},
		{".5MiB", 1 << 19},
		{"1.MiB", 1 << 20},
		{"0.5K", 512},
		{"1.0B", 1},
		{"1.000B", 1},
		{"0.001KiB", 1},  // 1.024 rounds down
		{"0.0001KiB", 0}, // 0.1024 rounds down
		{"1.9999999KB", 1999},
		{"1.1MB", 1100000},
		{"0.1GB", 1e8},
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775807B", math.MaxInt64},
		{"7EiB", 7 << 60},
		{"7.999999999999999999132638262011596452794037759304046630859375EiB", math.MaxInt64},
		{"7.99999999999999999913EiB", math.MaxInt64 - 1}, // rounds down
		{"9.223372036854775807EB", math.MaxInt64},
		{"8388607.999999999TiB", 9223372036854774708},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeInvalid(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string // substring of the error
	}{
		{"", `invalid size "": empty value`},
		{"   ", `invalid size "   ": empty value`},
		{"12XB", `invalid size "12XB": unknown unit "XB" (use B, KiB, MiB, GiB, TiB)`},
		{"-1", `invalid size "-1": negative values are not allowed`},
		{"-1KiB", "negative"},
		{"-0", "negative"},
		{"+5", `invalid size "+5": a sign is not allowed`},
		{"1e3", `invalid size "1e3": exponents are not allowed`},
		{"1E+3", "exponents are not allowed"},
		{"0x10", `invalid size "0x10": hexadecimal is not allowed`},
		{"1_000", "digit separators"},
		{"1,000", "digit separators"},
		{"1..5K", "more than one decimal point"},
		{"1.5.5K", "more than one decimal point"},
		{".", "expected digits after the decimal point"},
		{".KiB", "expected digits after the decimal point"},
		{"KiB", "not a number"},
		{"abc", "not a number"},
		{"NaN", "NaN and infinity"},
		{"inf", "NaN and infinity"},
		{"Infinity", "NaN and infinity"},
		{"1.5", "fractional number of bytes"},
		{"1.5B", "fractional number of bytes"},
		{"1  KiB", "at most one space"},
		{"1 \tKiB", "at most one space"},
		{"1\tKiB", "unexpected white space"},
		{"1 K iB", "unexpected white space"},
		{"1KiBs", `unknown unit "KiBs"`},
		{"1kıb", `unknown unit "kıb"`}, // dotless i must not fold to I
		{"1 2", `unknown unit "2"`},
		{"1Kib1", `unknown unit "Kib1"`},
		{"8EiB", "too large"},
		{"8E", "too large"},
		{"9.3EB", "too large"},
		{"9223372036854775808", `invalid size "9223372036854775808": too large`},
		{"99999999999999999999999999", "too large"},
		{"16384PiB", "too large"},
		{strings.Repeat("1", 300), "too long"},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, nil; want error containing %q", tt.in, got, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseSize(%q) error = %q; want it to contain %q", tt.in, err, tt.wantErr)
		}
		if got != 0 {
			t.Errorf("ParseSize(%q) = %d with an error; want 0", tt.in, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{100, "100B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{1025, "1025B"},
		{1280, "1.25KiB"},
		{1536, "1.5KiB"},
		{1792, "1.75KiB"},
		{1152, "1152B"}, // 1.125KiB needs three decimals
		{1 << 19, "512KiB"},
		{1<<20 + 1<<18, "1.25MiB"},
		{1<<20 + 1<<10, "1025KiB"},
		{67108864, "64MiB"},
		{3 << 29, "1.5GiB"},
		{1 << 40, "1TiB"},
		{1 << 50, "1PiB"},
		{1 << 60, "1EiB"},
		{7<<60 + 3<<58, "7.75EiB"},
		{math.MaxInt64, "9223372036854775807B"},
		{math.MaxInt64 - 1023, "9007199254740991KiB"},
		{1e9, "976562.5KiB"},
		{1e9 + 1, "1000000001B"},
		{-1, "-1B"},
		{math.MinInt64, "-9223372036854775808B"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestFormatSizeRoundTrip checks ParseSize(FormatSize(n)) == n around every
// unit boundary and quarter step.
func TestFormatSizeRoundTrip(t *testing.T) {
	var ns []int64
	for shift := 0; shift < 63; shift++ {
		p := int64(1) << shift
		ns = append(ns, p-1, p, p+1, p+p/2, p+p/4, p+p/4*3, 3*p)
	}
	ns = append(ns, math.MaxInt64, math.MaxInt64-1, 1e18, 999, 1000)
	for _, n := range ns {
		if n < 0 {
			continue
		}
		s := FormatSize(n)
		got, err := ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d", n, s, got, err, n)
		}
	}
}
