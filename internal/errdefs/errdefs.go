// Package errdefs holds airlock's error classes: a few sentinel errors
// that every error a caller may act on belongs to, so that each boundary
// (the HTTP API, MCP) maps a class to its answer in one place instead of
// each handler choosing one, and no one matches on error text.
//
// An error belongs to a class when errors.Is(err, class) holds: it wraps
// the class (New, Errorf, or fmt.Errorf with %w), or has an Is method that
// says so. A package keeps its own sentinels, with their identity and
// text, and puts them in a class by making them with New:
//
//	var ErrCapacity = errdefs.New(errdefs.ErrUnavailable, "at capacity")
//
// so that fmt.Errorf("%w: 12 sandboxes are live", ErrCapacity) matches
// both ErrCapacity and ErrUnavailable. An error in no class is the
// program's own failure.
//
// The package imports nothing but the standard library, so that any
// package, however low, may use it.
package errdefs

import (
	"errors"
	"fmt"
)

// The classes. Each says what the caller can do about the error.
var (
	// ErrInvalid: the request or its input is malformed or refused as
	// such (a bad field, path, name, config or argument). Sending it
	// again unchanged will not help.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound: what the request names does not exist, or is not the
	// caller's to see.
	ErrNotFound = errors.New("not found")
	// ErrDenied: the caller may not do this: it has no valid credential,
	// or its scope or a policy does not allow it.
	ErrDenied = errors.New("denied")
	// ErrConflict: what the request names is in a state that does not
	// allow it (a session that has ended, an image in use).
	ErrConflict = errors.New("conflict")
	// ErrLimit: the request is over a fixed ceiling (the size of a body
	// or a file, a sandbox's disk); it will be refused again.
	ErrLimit = errors.New("over a limit")
	// ErrUnavailable: the request cannot be served now but may be later:
	// a capacity or a caller's share is spent, the program is shutting
	// down, a dependency (the audit log, a secret's source) is failing.
	ErrUnavailable = errors.New("unavailable")
)

// classes are the classes in the order Class tries them: when an error
// belongs to several, the one that says most about what the caller did
// comes first, and ErrUnavailable, which says only "later", last.
var classes = []error{ErrDenied, ErrNotFound, ErrConflict, ErrLimit, ErrInvalid, ErrUnavailable}

// Class returns the class err belongs to, or nil for an error in none
// (and for nil). An error in several classes gets the first of ErrDenied,
// ErrNotFound, ErrConflict, ErrLimit, ErrInvalid and ErrUnavailable.
func Class(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// IsInvalid reports whether err belongs to ErrInvalid.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsNotFound reports whether err belongs to ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsDenied reports whether err belongs to ErrDenied.
func IsDenied(err error) bool { return errors.Is(err, ErrDenied) }

// IsConflict reports whether err belongs to ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsLimit reports whether err belongs to ErrLimit.
func IsLimit(err error) bool { return errors.Is(err, ErrLimit) }

// IsUnavailable reports whether err belongs to ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// New returns an error whose text is msg and that matches kind: a class,
// or an error that belongs to one (a package's sentinel).
func New(kind error, msg string) error {
	return &kindError{kind: kind, err: errors.New(msg)}
}

// Errorf returns an error whose text is the formatted message alone (the
// kind's own text is not added) and that matches kind as well as what the
// format wraps with %w. kind is a class or an error that belongs to one.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// kindError is an error put in a kind without the kind's text.
type kindError struct {
	kind error
	err  error // the message, and what it wraps
}

func (e *kindError) Error() string { return e.err.Error() }

// Unwrap returns the kind, then the message's own error, so errors.Is
// and errors.As see both.
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
