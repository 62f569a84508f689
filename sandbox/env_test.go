package sandbox

import (
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
