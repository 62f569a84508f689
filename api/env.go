package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Env is a command's added environment: "KEY=VALUE" entries, in order.
// A request may write it as an array of "KEY=VALUE" strings or as an
// object {"KEY": "VALUE"}, whose entries are taken in the order of their
// sorted names, so that the same object always gives the same
// environment. The entries are checked where they are used, whichever
// form they came in.
type Env []string

// UnmarshalJSON implements json.Unmarshaler.
func (e *Env) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*e = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return errors.New(`"env": want an array of "KEY=VALUE" strings or an object of strings`)
		}
		*e = list
		return nil
	case len(b) > 0 && b[0] == '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return errors.New(`"env": want an array of "KEY=VALUE" strings or an object of strings`)
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		slices.Sort(names)
		out := make([]string, 0, len(names))
		for _, k := range names {
			// A name holding "=" would be read as a shorter name with
			// part of it in the value: a different variable than asked.
			if strings.Contains(k, "=") {
				return fmt.Errorf(`"env": the name %q holds "="`, shorten(k))
			}
			var v string
			if err := json.Unmarshal(obj[k], &v); err != nil {
				return fmt.Errorf(`"env": the value of %q: want a string`, shorten(k))
			}
			out = append(out, k+"="+v)
		}
		*e = out
		return nil
	}
	return errors.New(`"env": want an array of "KEY=VALUE" strings or an object of strings`)
}

// shorten bounds a caller's text quoted in an error.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
