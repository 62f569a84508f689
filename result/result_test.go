package result

import "testing"

// TestLimitString: the CPU-time budget reads as such, not as the CPU
// bandwidth throttle that shares the word.
func TestLimitString(t *testing.T) {
	tests := []struct {
		l    Limit
		want string
	}{
		{Limit{Name: LimitMemory, Ceiling: 100, Observed: 100, Unit: UnitBytes}, "memory (ceiling 100 bytes, observed 100)"},
		{Limit{Name: LimitCPU, Ceiling: 2000, Observed: 2010, Unit: UnitMillis}, "cpu time (ceiling 2000 ms, observed 2010)"},
	}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
