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

// TestPostMortemSummary: the one line a person or a model reads names
// the largest files before what was running.
func TestPostMortemSummary(t *testing.T) {
	pm := &PostMortem{
		Files:       []DiskEntry{{Path: "/tmp/cache/big.bin", Bytes: 12 << 20}},
		Directories: []DiskEntry{{Path: "/tmp/cache", Bytes: 12 << 20, Entries: 1}, {Path: "/tmp/many", Entries: 3}},
		Processes:   []Process{{PID: 7, Command: "sh -c fill", RSSBytes: 1 << 20}},
		Note:        "only the first 20000 entries were read",
	}
	want := "largest files: /tmp/cache/big.bin (12.0 MiB); fullest directories: /tmp/cache (12.0 MiB in 1 entry), /tmp/many (0.0 MiB in 3 entries); running: sh -c fill (pid 7, 1.0 MiB); (only the first 20000 entries were read)"
	if got := pm.Summary(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
