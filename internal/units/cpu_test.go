package units

import (
	"strings"
	"testing"
)

func TestParseCPUValid(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0.5", 500},
		{"2", 2000},
		{"1.25", 1250},
		{"500m", 500},
		{"1m", 1},
		{"0.001", 1},
		{".5", 500},
		{"1.", 1000},
		{"1.5000", 1500},
		{"1024", 1024000},
		{"1024.000", 1024000},
		{"1024000m", 1024000},
		{" 2 ", 2000},
		{"0002", 2000},
	}
	for _, tt := range tests {
		got, err := ParseCPU(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseCPUInvalid(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"", `invalid CPU "": empty value`},
		{"0", `invalid CPU "0": must be more than zero`},
		{"0.000", "must be more than zero"},
		{"0m", "must be more than zero"},
		{"-1", "negative values are not allowed"},
		{"+1", "a sign is not allowed"},
		{"0.0005", "more precise than one millicore"},
		{"1.2345", "more precise than one millicore"},
		{"1.5m", "millicores must be a whole number"},
		{"1024.001", "too large (maximum is 1024 cores)"},
		{"1024001m", "too large"},
		{"1e3", "exponents are not allowed"},
		{"0x10", "hexadecimal is not allowed"},
		{"NaN", "NaN and infinity"},
		{"inf", "NaN and infinity"},
		{"abc", `not a number; use cores ("0.5", "2") or millicores ("500m")`},
		{"500M", `millicores are written with a lower-case "m"`},
		{"500 m", "white space is not allowed"},
		{"2cores", `unknown unit "cores"`},
		{"50%", `unknown unit "%"`},
		{strings.Repeat("9", 40), "too large"},
		{strings.Repeat("0", 300) + "1", "too long"},
	}
	for _, tt := range tests {
		got, err := ParseCPU(tt.in)
		if err == nil {
			t.Errorf("ParseCPU(%q) = %d, nil; want error containing %q", tt.in, got, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseCPU(%q) error = %q; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}
