package config

import (
	"errors"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Error classes. Every error Parse and Load return for a bad file matches
// ErrInvalid; Find and Config.Tool return errors matching ErrNotFound.
// They belong to errdefs.ErrInvalid and errdefs.ErrNotFound.
var (
	// ErrInvalid is the class of every *Error: the file is not a valid
	// airlock.yaml.
	ErrInvalid = errdefs.New(errdefs.ErrInvalid, "invalid config")
	// ErrNotFound is the class of a config file or a tool that does not
	// exist.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found")
)

// Error is a problem in a config file, located as precisely as the file
// allows. Its text reads
//
//	airlock.yaml:12:5: tools.fetch.limits.memory: invalid size "12QB": ...
//
// and every *Error matches errors.Is(err, ErrInvalid).
type Error struct {
	// File is the path of the file as it was given to Parse or Load.
	File string
	// Line and Column are 1-based; 0 means unknown (a problem with the
	// file as a whole, or a YAML syntax error without a position).
	Line, Column int
	// Field is the dotted path of the offending value, for example
	// "tools.fetch.limits.memory" or "tools.fetch.egress[2].ports[0]";
	// empty for problems of the file as a whole. A key that is not made
	// of letters, digits, '_' and '-' appears quoted: tools["a b"].
	Field string
	// Msg says what is wrong. It may be empty when Err says it all.
	Msg string
	// Err is the underlying error, if any: a units or egress policy
	// error, or the error of sbspec.Limits.Validate.
	Err error
}

// Error formats e as "file:line:col: field: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	switch {
	case e.Msg != "" && e.Err != nil:
		b.WriteString(e.Msg + ": " + e.Err.Error())
	case e.Msg != "":
		b.WriteString(e.Msg)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		b.WriteString(ErrInvalid.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalid or its class, errdefs.ErrInvalid,
// so that every *Error belongs to them whatever its underlying error.
func (e *Error) Is(target error) bool { return errors.Is(ErrInvalid, target) }

// quote quotes a value taken from the file for an error message. Long
// values are cut so that a hostile file cannot make a message huge, and
// quoting escapes control characters so that it cannot forge log lines.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// isRuneStart reports whether b can start a UTF-8 sequence.
func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
