package cli

import (
	"flag"
	"strings"
	"testing"
)

// TestFlagSuggestion: a misspelled flag is answered with the flag meant.
func TestFlagSuggestion(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error line; "" for no suggestion
	}{
		{[]string{"-memroy", "1GiB", "--", "true"}, "flag provided but not defined: -memroy (did you mean --memory?)"},
		{[]string{"--memroy=1GiB", "--", "true"}, "(did you mean --memory?)"},
		{[]string{"--memory", "1GiB", "--tiem", "3s"}, "(did you mean --time?)"},
		{[]string{"-t", "--workdr", "/tmp"}, "(did you mean --workdir?)"},
		{[]string{"--alow", "example.com"}, "(did you mean --allow?)"},
		{[]string{"--cpu-tme", "1s"}, "(did you mean --cpu-time?)"},
		{[]string{"--frobnicate"}, ""},
		{[]string{"-x"}, ""},
	}
	for _, tt := range tests {
		var stderr strings.Builder
		_, _, err := ParseRun(tt.args, &stderr)
		if err == nil {
			t.Fatalf("%v: accepted", tt.args)
		}
		got := stderr.String()
		if tt.want == "" && strings.Contains(got, "did you mean") || !strings.Contains(got, tt.want) {
			t.Errorf("%v: got %q, want %q", tt.args, got, tt.want)
		}
	}
	// Any command's flags, not only run's.
	fs := flag.NewFlagSet("airlock ps", flag.ContinueOnError)
	fs.Bool("json", false, "")
	var stderr strings.Builder
	if _, err := ParseFlags(fs, []string{"--jsno"}, &stderr); err == nil || !strings.Contains(stderr.String(), "(did you mean --json?)") {
		t.Errorf("ps --jsno: %v %q", err, stderr.String())
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"memory", "memory", 0}, {"memroy", "memory", 1}, {"memry", "memory", 1}, {"memoryy", "memory", 1}, {"mxmory", "memory", 1}, {"", "abc", 3}, {"time", "tty", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
