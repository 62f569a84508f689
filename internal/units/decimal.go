package units

import (
	"math/big"
	"strings"
)

// maxInputLen bounds the work done on untrusted input. No sensible size,
// duration or CPU value comes close to it.
const maxInputLen = 256

// decimal is an unsigned decimal number split at its point. Both parts hold
// ASCII digits only; either may be empty, but not both.
type decimal struct {
	whole string
	frac  string
}

// isSpace reports whether c is ASCII white space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// asciiUpper upper-cases the ASCII letters of s and leaves every other byte
// alone, so that Unicode case folding (for example "ı" to "I") cannot turn a
// look-alike into a valid unit.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// isDigit reports whether c is an ASCII decimal digit.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanDecimal reads an unsigned decimal number from the start of s and
// returns it with the unparsed remainder. ok is false when s does not start
// with a number (for example "", ".", "-1", "+1" or "x").
func scanDecimal(s string) (d decimal, rest string, ok bool) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	d.whole = s[:i]
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		d.frac = s[i+1 : j]
		i = j
	}
	if d.whole == "" && d.frac == "" {
		return decimal{}, s, false
	}
	return d, s[i:], true
}

// isZero reports whether every digit of d is zero.
func (d decimal) isZero() bool {
	return strings.Trim(d.whole, "0") == "" && strings.Trim(d.frac, "0") == ""
}

// rat returns d * mult as an exact rational.
func (d decimal) rat(mult int64) *big.Rat {
	num := new(big.Int)
	if digits := d.whole + d.frac; digits != "" {
		num.SetString(digits, 10)
	}
	num.Mul(num, big.NewInt(mult))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(d.frac))), nil)
	return new(big.Rat).SetFrac(num, den)
}

// prepare applies the rules shared by every parser: it trims white space,
// bounds the length and explains signs. It returns the trimmed input, or an
// error message (without the "invalid X %q: " prefix) when the input is
// rejected before parsing proper.
func prepare(s string) (string, string) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return "", "empty value"
	case len(t) > maxInputLen:
		return "", "too long"
	case t[0] == '-':
		return "", "negative values are not allowed"
	case t[0] == '+':
		return "", "a sign is not allowed"
	}
	return t, ""
}

// describeGarbage gives a short reason for input that does not start with a
// number, recognising a few common mistakes.
func describeGarbage(t string) string {
	lower := strings.ToLower(t)
	switch {
	case strings.HasPrefix(lower, "nan") || strings.HasPrefix(lower, "inf"):
		return "NaN and infinity are not numbers here"
	case strings.HasPrefix(t, "."):
		return "expected digits after the decimal point"
	}
	return "not a number"
}

// describeSuffix gives a reason for a number followed by an unexpected
// suffix that is clearly a number-syntax mistake rather than a unit, or ""
// when the suffix should be reported as an unknown unit.
func describeSuffix(d decimal, rest string) string {
	switch {
	case rest == "":
		return ""
	case rest[0] == 'e' || rest[0] == 'E':
		if len(rest) > 1 && (isDigit(rest[1]) || rest[1] == '+' || rest[1] == '-') {
			return "exponents are not allowed"
		}
	case rest[0] == 'x' || rest[0] == 'X':
		if d.whole == "0" && d.frac == "" {
			return "hexadecimal is not allowed"
		}
	case rest[0] == '_' || rest[0] == ',':
		return "digit separators are not allowed"
	case rest[0] == '.':
		return "more than one decimal point"
	}
	return ""
}
