package sandbox

import (
	"errors"
	"slices"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	tests := []struct {
		base, over, want []string
	}{
		{[]string{"A=1", "B=2"}, nil, []string{"A=1", "B=2"}},
		{[]string{"A=1", "B=2"}, []string{"B=3", "C=4"}, []string{"A=1", "B=3", "C=4"}},
		{[]string{"A=1"}, []string{"A=2", "A=3"}, []string{"A=3"}},
		{[]string{"A=1"}, []string{"A="}, []string{"A="}},
	}
	for _, tt := range tests {
		if got := mergeEnv(tt.base, tt.over); !slices.Equal(got, tt.want) {
			t.Errorf("mergeEnv(%v, %v) = %v, want %v", tt.base, tt.over, got, tt.want)
		}
	}
}

func TestExecRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		req  ExecRequest
		ok   bool
	}{
		{"fine", ExecRequest{Argv: []string{"true"}, Dir: "/tmp", Env: []string{"A=1", "B="}}, true},
		{"no argv", ExecRequest{Dir: "/tmp"}, false},
		{"empty argv0", ExecRequest{Argv: []string{""}, Dir: "/tmp"}, false},
		{"relative dir", ExecRequest{Argv: []string{"true"}, Dir: "tmp"}, false},
		{"NUL in arg", ExecRequest{Argv: []string{"echo", "a\x00b"}, Dir: "/"}, false},
		{"env without =", ExecRequest{Argv: []string{"true"}, Dir: "/", Env: []string{"A"}}, false},
		{"env empty name", ExecRequest{Argv: []string{"true"}, Dir: "/", Env: []string{"=x"}}, false},
		{"NUL in env", ExecRequest{Argv: []string{"true"}, Dir: "/", Env: []string{"A=\x00"}}, false},
	}
	for _, tt := range tests {
		err := tt.req.validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v is not ErrInvalid", tt.name, err)
		}
	}
}
