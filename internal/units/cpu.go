package units

import (
	"fmt"
	"math/big"
	"strings"
	"unicode"
)

// MaxCPU is the largest CPU bandwidth ParseCPU accepts, in millicores
// (1024 cores).
const MaxCPU int64 = 1024 * 1000

// cpuHint is appended to most ParseCPU errors.
const cpuHint = `use cores ("0.5", "2") or millicores ("500m")`

// ParseCPU parses a CPU bandwidth and returns it in millicores (thousandths
// of a core).
//
// It accepts a number of cores ("0.5", "2", "1.25") or a whole number of
// millicores with a lower-case "m" suffix ("500m"). The value must be more
// than zero and at most 1024 cores (MaxCPU millicores), and must not be more
// precise than one millicore: "1.0005" is rejected rather than rounded.
// Errors quote s.
func ParseCPU(s string) (int64, error) {
	t, msg := prepare(s)
	if msg != "" {
		return 0, cpuErr(s, msg)
	}
	d, rest, ok := scanDecimal(t)
	if !ok {
		return 0, cpuErr(s, describeGarbage(t)+"; "+cpuHint)
	}
	if why := describeSuffix(d, rest); why != "" {
		return 0, cpuErr(s, why)
	}
	var mult int64
	switch rest {
	case "":
		mult = 1000
	case "m":
		if d.frac != "" {
			return 0, cpuErr(s, "millicores must be a whole number")
		}
		mult = 1
	default:
		switch {
		case rest == "M":
			return 0, cpuErr(s, `unknown unit "M": millicores are written with a lower-case "m"`)
		case strings.IndexFunc(rest, unicode.IsSpace) >= 0:
			return 0, cpuErr(s, "white space is not allowed; "+cpuHint)
		}
		return 0, cpuErr(s, fmt.Sprintf("unknown unit %q; %s", rest, cpuHint))
	}
	r := d.rat(mult)
	if !r.IsInt() {
		return 0, cpuErr(s, "more precise than one millicore (0.001 cores)")
	}
	if r.Sign() == 0 {
		return 0, cpuErr(s, "must be more than zero")
	}
	if r.Cmp(new(big.Rat).SetInt64(MaxCPU)) > 0 {
		return 0, cpuErr(s, "too large (maximum is 1024 cores)")
	}
	return r.Num().Int64(), nil
}

// cpuErr formats a ParseCPU error.
func cpuErr(s, msg string) error {
	return fmt.Errorf("invalid CPU %q: %s", s, msg)
}
