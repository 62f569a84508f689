// Package units parses and formats the quantities airlock takes from the
// command line, configuration files and API requests: byte sizes, durations
// and CPU bandwidth.
//
// Every input is treated as untrusted. The parsers accept a small, documented
// grammar, do exact integer arithmetic (no floating point, so "0.1" means
// exactly one tenth), reject anything else, and return errors that quote the
// offending input and say what would have been accepted. None of them panics
// on any input.
//
// Shared rules for all parsers:
//
//   - Leading and trailing white space is ignored.
//   - Numbers are unsigned decimal: digits, optionally with a fractional part
//     ("1.5", ".5" and "1." are all accepted). Signs, exponents ("1e3"),
//     hexadecimal ("0x10"), digit separators ("1_000"), NaN and Inf are
//     rejected. A leading "-" is reported as a negative value.
//   - Inputs longer than 256 bytes are rejected outright.
package units
