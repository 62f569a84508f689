package units

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// Binary (IEC) multiples of a byte.
const (
	KiB int64 = 1 << (10 * (iota + 1)) // 1024 bytes
	MiB                                // 1024 KiB
	GiB                                // 1024 MiB
	TiB                                // 1024 GiB
	PiB                                // 1024 TiB
	EiB                                // 1024 PiB
)

// sizeUnits maps an upper-cased unit to its multiplier. The one-letter and
// "Ki"-style forms are binary, following ulimit, dd and Kubernetes; the
// "KB"-style forms are decimal SI units, as their names say.
var sizeUnits = map[string]int64{
	"": 1, "B": 1,

	"K": KiB, "KI": KiB, "KIB": KiB,
	"M": MiB, "MI": MiB, "MIB": MiB,
	"G": GiB, "GI": GiB, "GIB": GiB,
	"T": TiB, "TI": TiB, "TIB": TiB,
	"P": PiB, "PI": PiB, "PIB": PiB,
	"E": EiB, "EI": EiB, "EIB": EiB,

	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15, "EB": 1e18,
}

// unitHint is appended to unknown-unit errors.
const unitHint = "(use B, KiB, MiB, GiB, TiB)"

// ParseSize parses a byte size and returns it in bytes.
//
// Accepted forms are a plain number of bytes ("1048576") or a number followed
// by a unit ("64MiB", "1.5GiB", "512 KiB"), with at most one space between
// number and unit. Units are case-insensitive:
//
//   - B: bytes
//   - K, Ki, KiB; M, Mi, MiB; G, Gi, GiB; T, Ti, TiB; P, Pi, PiB; E, Ei, EiB:
//     binary multiples, 1024, 1024², ...
//   - KB, MB, GB, TB, PB, EB: decimal SI multiples, 1000, 1000², ...
//
// Note the asymmetry: "1K" is 1024 bytes but "1KB" is 1000 bytes.
//
// A fractional number needs a unit larger than a byte; the result is rounded
// down to a whole byte ("1.5KiB" is 1536, "0.001KiB" is 1). Zero is accepted.
// Negative values, values above math.MaxInt64 bytes (so "8EiB" is too large)
// and anything outside this grammar are rejected with an error that quotes s.
func ParseSize(s string) (int64, error) {
	t, msg := prepare(s)
	if msg != "" {
		return 0, sizeErr(s, msg)
	}
	d, rest, ok := scanDecimal(t)
	if !ok {
		return 0, sizeErr(s, describeGarbage(t))
	}
	if why := describeSuffix(d, rest); why != "" {
		return 0, sizeErr(s, why)
	}
	unit := rest
	if strings.HasPrefix(unit, " ") {
		unit = unit[1:]
		if unit == "" || isSpace(unit[0]) {
			return 0, sizeErr(s, "at most one space is allowed between number and unit")
		}
	}
	mult, known := sizeUnits[asciiUpper(unit)]
	if !known {
		if strings.IndexFunc(unit, unicode.IsSpace) >= 0 {
			return 0, sizeErr(s, "unexpected white space")
		}
		return 0, sizeErr(s, fmt.Sprintf("unknown unit %q %s", unit, unitHint))
	}
	if d.frac != "" && strings.Trim(d.frac, "0") != "" && mult == 1 {
		return 0, sizeErr(s, "a fractional number of bytes needs a unit such as KiB or MiB")
	}
	r := d.rat(mult)
	v := new(big.Int).Quo(r.Num(), r.Denom())
	if !v.IsInt64() {
		return 0, sizeErr(s, fmt.Sprintf("too large (maximum is %d bytes, just under 8EiB)", int64(math.MaxInt64)))
	}
	return v.Int64(), nil
}

// sizeErr formats a ParseSize error.
func sizeErr(s, msg string) error {
	return fmt.Errorf("invalid size %q: %s", s, msg)
}

// formatUnits lists the units FormatSize may use, largest first.
var formatUnits = []struct {
	name string
	size int64
}{
	{"EiB", EiB}, {"PiB", PiB}, {"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
}

// FormatSize renders n bytes compactly with a binary unit: 67108864 is
// "64MiB", 1536 is "1.5KiB", 100 is "100B", 0 is "0B".
//
// The result is always exact, so ParseSize(FormatSize(n)) == n for every
// n >= 0. It uses the largest unit in which n is a whole number or has at
// most two decimal places (quarters: .25, .5, .75), and otherwise falls back
// to a smaller unit, ultimately to plain bytes (1025 is "1025B").
// Negative n, which is never a valid size, is rendered as plain bytes.
func FormatSize(n int64) string {
	if n < 0 {
		return strconv.FormatInt(n, 10) + "B"
	}
	for _, u := range formatUnits {
		if n < u.size {
			continue
		}
		whole, rem := n/u.size, n%u.size
		// rem/u.size has at most two decimals iff 100*rem is a multiple of
		// u.size, i.e. rem is a multiple of u.size/4 (u.size is a power of
		// two of at least 1024, so this division is exact).
		quarter := u.size / 4
		if rem%quarter != 0 {
			continue
		}
		out := strconv.FormatInt(whole, 10)
		switch rem / quarter {
		case 1:
			out += ".25"
		case 2:
			out += ".5"
		case 3:
			out += ".75"
		}
		return out + u.name
	}
	return strconv.FormatInt(n, 10) + "B"
}
