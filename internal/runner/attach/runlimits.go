package attach

import (
	"fmt"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/sandbox"
)

// RunLimits are the ceilings of one run of a tool whose ceilings are
// ceil, lowered as the caller asks (nil asks nothing). A run may lower its
// own ceilings, never raise them: a value above the tool's is refused
// (errdefs.ErrDenied) naming the limit and the tool's ceiling, since the
// tool's ceilings are the operator's policy, and the node's capacity is
// booked by them. A value that is not one, or is under the minimum, is
// errdefs.ErrInvalid.
func RunLimits(ceil sandbox.Limits, want *api.RunLimits) (sandbox.Limits, error) {
	l := ceil
	if want == nil {
		return l, nil
	}
	size := func(name, v string, cur int64, dst *int64) error {
		if v == "" {
			return nil
		}
		n, err := units.ParseSize(v)
		if err != nil {
			return errdefs.Errorf(errdefs.ErrInvalid, "limits.%s: %q: want a size such as 64MiB", name, short(v))
		}
		if n > cur {
			return over(name, units.FormatSize(n), units.FormatSize(cur))
		}
		*dst = n
		return nil
	}
	dur := func(name, v string, cur time.Duration, dst *time.Duration) error {
		if v == "" {
			return nil
		}
		d, err := units.ParseDuration(v)
		if err != nil || d <= 0 {
			return errdefs.Errorf(errdefs.ErrInvalid, "limits.%s: %q: want a duration above zero such as 2s", name, short(v))
		}
		// A CPU-time budget of 0 is none at all: any value is a lowering.
		if cur > 0 && d > cur {
			return over(name, d.String(), cur.String())
		}
		*dst = d
		return nil
	}
	if err := size("memory", want.Memory, ceil.Memory, &l.Memory); err != nil {
		return ceil, err
	}
	if err := size("output", want.Output, ceil.Output, &l.Output); err != nil {
		return ceil, err
	}
	if err := dur("time", want.Time, ceil.Time, &l.Time); err != nil {
		return ceil, err
	}
	if err := dur("cpu_time", want.CPUTime, ceil.CPUTime, &l.CPUTime); err != nil {
		return ceil, err
	}
	switch {
	case want.Pids < 0:
		return ceil, errdefs.Errorf(errdefs.ErrInvalid, "limits.pids: %d: want a count above zero", want.Pids)
	case want.Pids > ceil.Pids:
		return ceil, over("pids", fmt.Sprint(want.Pids), fmt.Sprint(ceil.Pids))
	case want.Pids > 0:
		l.Pids = want.Pids
	}
	if err := l.Validate(); err != nil {
		return ceil, errdefs.Errorf(errdefs.ErrInvalid, "limits: %v", err)
	}
	return l, nil
}

func over(name, asked, ceiling string) error {
	return errdefs.Errorf(errdefs.ErrDenied, "limits.%s: %s is over the tool's ceiling of %s; a run may lower its limits, not raise them", name, asked, ceiling)
}

func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
