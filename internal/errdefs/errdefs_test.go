package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// typed is a structured error that reports its class with an Is method.
type typed struct{ name string }

func (e *typed) Error() string        { return "typed " + e.name }
func (e *typed) Is(target error) bool { return target == ErrLimit }

func TestClass(t *testing.T) {
	sentinel := New(ErrUnavailable, "at capacity")
	tests := []struct {
		name     string
		err      error
		want     error
		wantText string
	}{
		{"nil", nil, nil, ""},
		{"unclassified", errors.New("boom"), nil, "boom"},
		{"a class itself", ErrNotFound, ErrNotFound, "not found"},
		{"New", New(ErrInvalid, "bad field"), ErrInvalid, "bad field"},
		{"Errorf", Errorf(ErrDenied, "token %s may not", "ci"), ErrDenied, "token ci may not"},
		{"a package's sentinel", sentinel, ErrUnavailable, "at capacity"},
		{"the sentinel wrapped with context", fmt.Errorf("%w: 3 live", sentinel), ErrUnavailable, "at capacity: 3 live"},
		{"wrapped by fmt", fmt.Errorf("open: %w", ErrConflict), ErrConflict, "open: conflict"},
		{"an Is method", fmt.Errorf("x: %w", &typed{"a"}), ErrLimit, "x: typed a"},
		// Several classes: the one that says most about the request wins.
		{"limit and invalid", Errorf(ErrInvalid, "%w", New(ErrLimit, "too big")), ErrLimit, "too big"},
		{"unavailable and denied", Errorf(ErrUnavailable, "%w", ErrDenied), ErrDenied, "denied"},
	}
	for _, tt := range tests {
		if got := Class(tt.err); got != tt.want {
			t.Errorf("%s: Class(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
		if tt.err != nil && tt.err.Error() != tt.wantText {
			t.Errorf("%s: text %q, want %q", tt.name, tt.err.Error(), tt.wantText)
		}
	}
}

func TestIs(t *testing.T) {
	is := map[error]func(error) bool{
		ErrInvalid: IsInvalid, ErrNotFound: IsNotFound, ErrDenied: IsDenied,
		ErrConflict: IsConflict, ErrLimit: IsLimit, ErrUnavailable: IsUnavailable,
	}
	if len(is) != len(classes) {
		t.Fatalf("%d helpers for %d classes", len(is), len(classes))
	}
	for class, f := range is {
		for other := range is {
			err := Errorf(other, "wrapped")
			if got, want := f(err), class == other; got != want {
				t.Errorf("Is%v(an error of %v) = %v, want %v", class, other, got, want)
			}
		}
	}
}

func TestErrorfKeepsWrapped(t *testing.T) {
	err := Errorf(ErrNotFound, "no file: %w", fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("%v does not match both fs.ErrNotExist and ErrNotFound", err)
	}
	var te *typed
	if errors.As(Errorf(ErrInvalid, "%w", &typed{"b"}), &te); te == nil || te.name != "b" {
		t.Fatalf("errors.As through Errorf: %v", te)
	}
}
