package cli

import (
	"testing"

	"github.com/airlockhq/airlock/result"
)

func TestLimitMessage(t *testing.T) {
	tests := []struct {
		limit     result.Limit
		tool      string
		viaDaemon bool
		want      string
	}{
		{result.Limit{Name: "memory", Ceiling: 67108864, Observed: 67108864, Unit: "bytes"}, "", false,
			"limit exceeded: memory limit of 64 MiB reached (observed 64 MiB); raise it with --memory or tools.NAME.limits.memory in the config"},
		{result.Limit{Name: "memory", Ceiling: 1 << 30, Observed: 1<<30 - 4096, Unit: "bytes"}, "py", false,
			"limit exceeded: memory limit of 1 GiB reached (observed 1024 MiB); raise it with --memory or tools.py.limits.memory in the config"},
		{result.Limit{Name: "pids", Ceiling: 16, Observed: 16, Unit: "count"}, "", false,
			"limit exceeded: process limit of 16 reached (observed 16); raise it with --pids or tools.NAME.limits.pids in the config"},
		{result.Limit{Name: "disk", Ceiling: 4096, Observed: 4096, Unit: "inodes"}, "", false,
			"limit exceeded: disk limit of 4096 inodes reached (observed 4096 inodes); raise it with --disk or tools.NAME.limits.disk in the config"},
		{result.Limit{Name: "time", Ceiling: 1500, Observed: 1502, Unit: "ms"}, "", false,
			"limit exceeded: time limit of 1.5s reached (observed 1.502s); raise it with --time or tools.NAME.limits.time in the config"},
		// The CPU-time budget, not the --cpu throttle.
		{result.Limit{Name: "cpu", Ceiling: 2000, Observed: 2010, Unit: "ms"}, "", false,
			"limit exceeded: CPU time limit of 2s reached (observed 2.01s); raise it with --cpu-time or tools.NAME.limits.cpu_time in the config"},
		{result.Limit{Name: "output", Ceiling: 100, Observed: 101, Unit: "bytes"}, "", false,
			"limit exceeded: output limit of 100 bytes reached (observed 101 bytes); raise it with --output or tools.NAME.limits.output in the config"},
		// Through a daemon the flags may only lower the tool's ceilings.
		{result.Limit{Name: "time", Ceiling: 1000, Observed: 1000, Unit: "ms"}, "sh", true,
			"limit exceeded: time limit of 1s reached (observed 1s); raise it with tools.sh.limits.time in the daemon's config"},
	}
	for _, tt := range tests {
		if got := LimitMessage(&tt.limit, tt.tool, tt.viaDaemon); got != tt.want {
			t.Errorf("LimitMessage(%+v)\n got %q\nwant %q", tt.limit, got, tt.want)
		}
	}
}
