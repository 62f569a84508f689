package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/result"
)

// limitKnobs says, per limit name, what the breached ceiling is called
// for people and where it is set: the run flag and the config key under
// a tool's limits. "cpu" is the CPU-time budget (--cpu-time); the CPU
// bandwidth throttle (--cpu) slows a command down but is never breached.
var limitKnobs = map[string]struct{ what, flag, key string }{
	result.LimitMemory: {"memory", "--memory", "memory"},
	result.LimitPids:   {"process", "--pids", "pids"},
	result.LimitDisk:   {"disk", "--disk", "disk"},
	result.LimitFDs:    {"open file", "--fds", "fds"},
	result.LimitOutput: {"output", "--output", "output"},
	result.LimitTime:   {"time", "--time", "time"},
	result.LimitCPU:    {"CPU time", "--cpu-time", "cpu_time"},
}

// LimitMessage is what the CLI says of a breach: the ceiling in human
// units and how to raise it (tool names the config's tool, if any). A run
// that went to a daemon (viaDaemon) can only be raised in the daemon's
// config: its flags may lower the tool's ceilings, never raise them. The
// result and the API keep the numbers.
func LimitMessage(l *result.Limit, tool string, viaDaemon bool) string {
	if l == nil {
		return "limit exceeded"
	}
	k, ok := limitKnobs[l.Name]
	if !ok {
		return "limit exceeded: " + l.String()
	}
	if tool == "" {
		tool = "NAME"
	}
	head := fmt.Sprintf("limit exceeded: %s limit of %s reached (observed %s)", k.what, humanAmount(l.Ceiling, l.Unit), humanAmount(l.Observed, l.Unit))
	if viaDaemon {
		return fmt.Sprintf("%s; raise it with tools.%s.limits.%s in the daemon's config", head, tool, k.key)
	}
	return fmt.Sprintf("%s; raise it with %s or tools.%s.limits.%s in the config", head, k.flag, tool, k.key)
}

// humanAmount renders n in unit for people: 67108864 bytes is "64 MiB",
// 1500 ms is "1.5s", 16 count is "16".
func humanAmount(n int64, unit string) string {
	switch unit {
	case result.UnitBytes:
		return humanSize(n)
	case result.UnitMillis:
		return (time.Duration(n) * time.Millisecond).String()
	case result.UnitCount:
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// humanSize is n bytes in the largest binary unit it reaches, to one
// decimal place at most (approximate: the exact number is in the result).
func humanSize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	v, u := float64(n)/1024, units[0]
	for _, next := range units[1:] {
		if v < 1024 {
			break
		}
		v, u = v/1024, next
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + u
}
