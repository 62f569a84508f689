package units

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
	"unicode"
)

// durationUnits maps the unit names of time.ParseDuration to nanoseconds.
var durationUnits = map[string]int64{
	"ns": int64(time.Nanosecond),
	"us": int64(time.Microsecond),
	"µs": int64(time.Microsecond), // U+00B5 micro sign
	"μs": int64(time.Microsecond), // U+03BC Greek small letter mu
	"ms": int64(time.Millisecond),
	"s":  int64(time.Second),
	"m":  int64(time.Minute),
	"h":  int64(time.Hour),
}

// durationHint is appended to most ParseDuration errors.
const durationHint = `use seconds ("30", "1.5") or a Go duration ("1m30s", "250ms", "2h")`

// ParseDuration parses a duration.
//
// It accepts a plain number, meaning seconds ("30", "1.5", "0"), or a Go
// duration as accepted by time.ParseDuration ("1m30s", "250ms", "2h",
// "1.5h"; units ns, us, µs, ms, s, m, h; units are case-sensitive), except
// that a sign is not allowed. Zero is accepted; whether it means "no limit"
// is for the caller to decide.
//
// Unlike time.ParseDuration the arithmetic is exact: the total is computed
// without rounding and then truncated to whole nanoseconds. A value that is
// not zero but would truncate to zero ("0.1ns") is rejected rather than
// silently turned into 0. Negative values, values above the largest
// time.Duration (about 292 years), NaN, Inf and anything else outside the
// grammar are rejected with an error that quotes s.
func ParseDuration(s string) (time.Duration, error) {
	t, msg := prepare(s)
	if msg != "" {
		return 0, durationErr(s, msg)
	}
	// A plain number is a number of seconds.
	if d, after, ok := scanDecimal(t); ok && after == "" {
		return finishDuration(s, d.rat(int64(time.Second)), !d.isZero())
	}
	total := new(big.Rat)
	nonZero := false
	for rest := t; rest != ""; {
		d, after, ok := scanDecimal(rest)
		if !ok {
			if rest == t {
				return 0, durationErr(s, describeGarbage(t)+"; "+durationHint)
			}
			return 0, durationErr(s, fmt.Sprintf("expected a number at %q; %s", rest, durationHint))
		}
		if why := describeSuffix(d, after); why != "" {
			return 0, durationErr(s, why)
		}
		// The unit runs up to the next number.
		end := strings.IndexFunc(after, func(r rune) bool { return r == '.' || ('0' <= r && r <= '9') })
		if end < 0 {
			end = len(after)
		}
		unit := after[:end]
		rest = after[end:]
		if unit == "" {
			return 0, durationErr(s, "missing unit after a number; "+durationHint)
		}
		mult, known := durationUnits[unit]
		if !known {
			if strings.IndexFunc(unit, unicode.IsSpace) >= 0 {
				return 0, durationErr(s, "white space is not allowed inside a duration")
			}
			return 0, durationErr(s, fmt.Sprintf("unknown unit %q (use ns, us, ms, s, m, h)", unit))
		}
		if !d.isZero() {
			nonZero = true
		}
		total.Add(total, d.rat(mult))
		// Checking as we go keeps the numbers small however many
		// components the input has.
		if total.Cmp(maxDurationRat) > 0 {
			break
		}
	}
	return finishDuration(s, total, nonZero)
}

// finishDuration truncates an exact total of nanoseconds to a Duration,
// rejecting totals out of range and non-zero inputs that truncate to zero.
func finishDuration(s string, total *big.Rat, nonZero bool) (time.Duration, error) {
	if total.Cmp(maxDurationRat) > 0 {
		return 0, durationErr(s, "too large (maximum is "+time.Duration(math.MaxInt64).String()+")")
	}
	ns := new(big.Int).Quo(total.Num(), total.Denom())
	if nonZero && ns.Sign() == 0 {
		return 0, durationErr(s, "too small: a non-zero value that rounds down to 0ns")
	}
	return time.Duration(ns.Int64()), nil
}

// maxDurationRat is the largest time.Duration in nanoseconds. A total a
// fraction of a nanosecond above it would still truncate into range, but is
// rejected too: the simpler bound is easier to reason about.
var maxDurationRat = new(big.Rat).SetInt64(math.MaxInt64)

// durationErr formats a ParseDuration error.
func durationErr(s, msg string) error {
	return fmt.Errorf("invalid duration %q: %s", s, msg)
}
