package attach

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/sandbox"
)

func TestRunLimits(t *testing.T) {
	ceil := sandbox.DefaultLimits()
	ceil.Memory, ceil.Time, ceil.Pids, ceil.Output, ceil.CPUTime = 256<<20, time.Minute, 64, 1<<20, 0
	for _, tc := range []struct {
		name string
		want *api.RunLimits
		err  error
		msg  string
		got  func(sandbox.Limits) bool
	}{
		{"none", nil, nil, "", func(l sandbox.Limits) bool { return l == ceil }},
		{"lower all", &api.RunLimits{Memory: "64MiB", Time: "2s", Pids: 16, Output: "1KiB", CPUTime: "1s"}, nil, "", func(l sandbox.Limits) bool {
			return l.Memory == 64<<20 && l.Time == 2*time.Second && l.Pids == 16 && l.Output == 1024 && l.CPUTime == time.Second && l.Disk == ceil.Disk
		}},
		{"equal", &api.RunLimits{Memory: "256MiB", Time: "60s"}, nil, "", func(l sandbox.Limits) bool { return l == ceil }},
		{"memory over", &api.RunLimits{Memory: "257MiB"}, errdefs.ErrDenied, "limits.memory: 257MiB is over the tool's ceiling of 256MiB", nil},
		{"time over", &api.RunLimits{Time: "61s"}, errdefs.ErrDenied, "limits.time: 1m1s is over the tool's ceiling of 1m0s", nil},
		{"pids over", &api.RunLimits{Pids: 65}, errdefs.ErrDenied, "limits.pids: 65 is over", nil},
		{"output over", &api.RunLimits{Output: "2MiB"}, errdefs.ErrDenied, "limits.output: 2MiB is over", nil},
		{"bad size", &api.RunLimits{Memory: "lots"}, errdefs.ErrInvalid, `limits.memory: "lots": want a size`, nil},
		{"zero time", &api.RunLimits{Time: "0s"}, errdefs.ErrInvalid, "limits.time", nil},
		{"negative pids", &api.RunLimits{Pids: -1}, errdefs.ErrInvalid, "limits.pids", nil},
		{"under minimum", &api.RunLimits{Pids: 1}, errdefs.ErrInvalid, "below the minimum", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := RunLimits(ceil, tc.want)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("got %v, want %v saying %q", err, tc.err, tc.msg)
				}
				if l != ceil {
					t.Fatalf("refused, yet limits %+v", l)
				}
				return
			}
			if err != nil || !tc.got(l) {
				t.Fatalf("got %+v, %v", l, err)
			}
		})
	}
}
