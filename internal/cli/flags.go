package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/units"
)

// ParseNoArgs parses the flags of a command that takes no arguments. done
// is true when the command should end now, with err (nil after -h).
func ParseNoArgs(fs *flag.FlagSet, args []string, stdio IO) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return true, &ExitError{Code: 2}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stdio.Stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return true, &ExitError{Code: 2}
	}
	return false, nil
}

// sizeFlag is a flag.Value for byte sizes ("64MiB").
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return units.FormatSize(*f.v)
}

func (f sizeFlag) Set(s string) error {
	n, err := units.ParseSize(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// countFlag is a flag.Value for positive whole numbers.
type countFlag struct{ v *int64 }

func (f countFlag) String() string {
	if f.v == nil {
		return ""
	}
	return fmt.Sprint(*f.v)
}

func (f countFlag) Set(s string) error {
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(s) || n <= 0 {
		return fmt.Errorf("invalid count %q: want a positive whole number", s)
	}
	*f.v = n
	return nil
}

// durationFlag is a flag.Value for durations ("30s", or plain seconds).
type durationFlag struct {
	v         *time.Duration
	allowZero bool
}

func (f durationFlag) String() string {
	if f.v == nil {
		return ""
	}
	return f.v.String()
}

func (f durationFlag) Set(s string) error {
	d, err := units.ParseDuration(s)
	if err != nil {
		return err
	}
	if d == 0 && !f.allowZero {
		return fmt.Errorf("invalid duration %q: must be positive", s)
	}
	*f.v = d
	return nil
}

// cpuFlag is a flag.Value for CPU bandwidth in cores.
type cpuFlag struct{ v *int64 }

func (f cpuFlag) String() string {
	if f.v == nil {
		return ""
	}
	return fmt.Sprintf("%g", float64(*f.v)/1000)
}

func (f cpuFlag) Set(s string) error {
	if s == "0" || s == "none" {
		*f.v = 0
		return nil
	}
	m, err := units.ParseCPU(s)
	if err != nil {
		return err
	}
	*f.v = m
	return nil
}

// envFlag is a repeatable flag.Value collecting KEY=VALUE pairs.
type envFlag struct{ v *[]string }

func (f envFlag) String() string { return "" }

func (f envFlag) Set(s string) error {
	k, _, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("invalid %q: want KEY=VALUE", s)
	case k == "":
		return fmt.Errorf("invalid %q: empty name", s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("invalid %q: contains a NUL byte", s)
	}
	*f.v = append(*f.v, s)
	return nil
}

// allowFlag is a repeatable flag.Value of egress destinations; it keeps
// each as given too (the lazy gateway's helper parses them again).
type allowFlag struct {
	v   *[]policy.Destination
	raw *[]string
}

func (f allowFlag) String() string { return "" }

func (f allowFlag) Set(s string) error {
	d, err := policy.ParseDestination(s)
	if err != nil {
		return err
	}
	*f.v = append(*f.v, d)
	*f.raw = append(*f.raw, s)
	return nil
}
