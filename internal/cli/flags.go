package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/units"
)

// ExitUsage is the exit status of a command line airlock cannot take (an
// unknown command or flag, a bad value, a missing argument), in every
// command alike. It is 125, as for any failure of airlock itself (and as
// docker does): run and session exec pass the command's own status
// through, and a usage error must not look like one of those.
const ExitUsage = ExitFailure

// UsageError prints "name: problem" and where to find name's flags, and
// returns the usage error to end the command with.
func UsageError(stderr io.Writer, name, format string, args ...any) error {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s -h' for its usage.\n", name, fmt.Sprintf(format, args...), name)
	return &ExitError{Code: ExitUsage}
}

// ParseFlags parses args into fs. -h prints fs.Usage and ends the command
// (done, with a nil error); a bad flag is one line and a pointer to -h,
// not the whole usage.
func ParseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (done bool, err error) {
	// The flag package prints the error and the whole usage itself:
	// neither, here.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, flag.ErrHelp):
		if fs.Usage != nil {
			fs.Usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return true, nil
	}
	hint := ""
	if name := unknownFlag(fs, args); name != "" {
		hint = didYouMean(fs, name)
	}
	return true, UsageError(stderr, fs.Name(), "%v%s", err, hint)
}

// ParseNoArgs parses the flags of a command that takes no arguments. done
// is true when the command should end now, with err (nil after -h).
func ParseNoArgs(fs *flag.FlagSet, args []string, stdio IO) (done bool, err error) {
	if done, err := ParseFlags(fs, args, stdio.Stderr); done {
		return true, err
	}
	if fs.NArg() > 0 {
		return true, UsageError(stdio.Stderr, fs.Name(), "unexpected argument %q", fs.Arg(0))
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
	// private: the destination may be in a private range (--allow-private).
	private bool
}

// AllowFlag is --allow (or, private, --allow-private) appending to dst,
// for a command other than run that takes egress destinations (image
// build).
func AllowFlag(dst *[]policy.Destination, raw *[]string, private bool) flag.Value {
	return allowFlag{v: dst, raw: raw, private: private}
}

func (f allowFlag) String() string { return "" }

func (f allowFlag) Set(s string) error {
	d, err := policy.Compile(policy.Spec{Host: s, Private: f.private})
	if err != nil {
		return err
	}
	*f.v = append(*f.v, d)
	*f.raw = append(*f.raw, s)
	return nil
}
