// Package jsonin says what is wrong with a caller's JSON in the caller's
// terms: encoding/json's errors name Go types and struct fields ("cannot
// unmarshal object into Go struct field RunRequest.env of type []string"),
// which are the daemon's internals, not the API's. Every edge that reads
// a caller's JSON (the native API, sessions, MCP, the E2B API) describes
// its errors here.
package jsonin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Describe turns an error of decoding a caller's JSON into a sentence for
// the caller: the field at fault, the shape it wants and what it got. An
// error that is none of encoding/json's own (a type's UnmarshalJSON, whose
// messages are written for callers, or an unknown field) is kept.
func Describe(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		got := te.Value
		if got != "" && got != "null" {
			got = article(got) + " " + got
		}
		if te.Field == "" {
			return fmt.Sprintf("want %s, got %s", Shape(te.Type), got)
		}
		return fmt.Sprintf("%q: want %s, got %s", te.Field, Shape(te.Type), got)
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.EOF):
		return "the body is empty; want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends before its value does"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// Shape says in JSON's terms what a value of type t is written as.
func Shape(t reflect.Type) string {
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
		return "an array of " + plural(Shape(t.Elem()))
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
