// JSON a caller sent, described in the caller's terms: encoding/json's
// errors name Go types and struct fields ("cannot unmarshal object into
// Go struct field RunRequest.env of type []string"), which are the
// daemon's internals, not the API's. Every edge that reads a caller's
// JSON (the native API, sessions, MCP, the E2B API) describes its errors
// here.

package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// DescribeJSON turns an error of decoding a caller's JSON into a sentence for
// the caller: the field at fault, the shape it wants and what it got. An
// error that is none of encoding/json's own (a type's UnmarshalJSON, whose
// messages are written for callers, or an unknown field) is kept.
func DescribeJSON(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		got := te.Value
		if got != "" && got != "null" {
			got = article(got) + " " + got
		}
		if te.Field == "" {
			return fmt.Sprintf("want %s, got %s", JSONShape(te.Type), got)
		}
		return fmt.Sprintf("%q: want %s, got %s", te.Field, JSONShape(te.Type), got)
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.EOF):
		return "the body is empty; want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends before its value does"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// JSONShape says in JSON's terms what a value of type t is written as.
func JSONShape(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return "a base64 string"
		}
		return "an array of " + plural(JSONShape(t.Elem()))
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

// plural turns "a string" into "strings", "an array of x" into "arrays of x".
func plural(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
	head, rest, _ := strings.Cut(s, " ")
	if rest != "" {
		rest = " " + rest
	}
	if head == "true" {
		return "booleans"
	}
	return head + "s" + rest
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// JSONBody is how an edge reads a caller's JSON body.
type JSONBody struct {
	// Max bounds the body, in bytes.
	Max int64
	// AllowUnknown takes fields v does not have (a wire format whose
	// clients send more than the server reads); otherwise each is
	// refused by name, so that a misspelt field is not silently dropped.
	AllowUnknown bool
	// AllowEmpty takes an empty body (or only white space) as no
	// fields at all, leaving v as it is.
	AllowEmpty bool
}

// Decode reads one JSON value from body into v. Its errors are classed
// (errdefs) and written for the caller: ErrLimit for a body over b.Max
// (a *http.MaxBytesError is kept in the chain when body is one), ErrInvalid
// for one that is not v's JSON (DescribeJSON's sentence) or holds more
// than one value. A read that fails otherwise (the caller's connection)
// is returned as it is.
func (b JSONBody) Decode(body io.Reader, v any) error {
	raw, err := io.ReadAll(io.LimitReader(body, b.Max+1))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errdefs.Errorf(errdefs.ErrLimit, "the body is over %d bytes: %w", b.Max, err)
	case err != nil:
		return err
	case int64(len(raw)) > b.Max:
		return errdefs.Errorf(errdefs.ErrLimit, "the body is over %d bytes", b.Max)
	case b.AllowEmpty && len(bytes.TrimSpace(raw)) == 0:
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if !b.AllowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return errdefs.New(errdefs.ErrInvalid, DescribeJSON(err))
	}
	if dec.More() {
		return errdefs.New(errdefs.ErrInvalid, "more than one value")
	}
	return nil
}
