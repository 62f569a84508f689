package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// InputError says which input of a call was refused and why. Its text is
// written for the agent that made the call.
type InputError struct {
	Input  string // "" when the arguments as a whole are wrong
	Reason string
}

func (e *InputError) Error() string {
	if e.Input == "" {
		return "invalid arguments: " + e.Reason
	}
	return fmt.Sprintf("invalid input %q: %s", e.Input, e.Reason)
}

// Is reports whether target is errdefs.ErrInvalid: a refused input is the
// caller's to correct.
func (e *InputError) Is(target error) bool { return target == errdefs.ErrInvalid }

// maxArguments bounds the arguments object of a call.
const maxArguments = 1 << 20

// Check parses the text form of a value (a default in the file) for the
// input's type and checks it; it returns the value or why it is refused.
func (in *Input) Check(s string) (any, string) {
	switch in.Type {
	case InputInteger:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, "not an integer"
		}
		return v, in.checkNumber(float64(v))
	case InputNumber:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, "not a number"
		}
		return v, in.checkNumber(v)
	case InputBoolean:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return nil, "not true or false"
		}
		return v, ""
	}
	return s, in.checkString(s)
}

func (in *Input) checkNumber(v float64) string {
	if in.Minimum != nil && v < *in.Minimum {
		return fmt.Sprintf("below the minimum %v", *in.Minimum)
	}
	if in.Maximum != nil && v > *in.Maximum {
		return fmt.Sprintf("above the maximum %v", *in.Maximum)
	}
	return ""
}

func (in *Input) checkString(s string) string {
	switch {
	case len(s) > in.MaxLength:
		return fmt.Sprintf("%d bytes; at most %d", len(s), in.MaxLength)
	case strings.IndexByte(s, 0) >= 0:
		return "holds a NUL byte, which no argument can carry"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case len(in.Enum) > 0 && !slices.Contains(in.Enum, s):
		return "must be one of " + strings.Join(in.Enum, ", ")
	}
	return ""
}

// value reads one argument value from JSON and returns its text form.
func (in *Input) value(raw json.RawMessage) (string, string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", "not valid JSON"
	}
	switch in.Type {
	case InputString:
		s, ok := v.(string)
		if !ok {
			return "", "must be a string"
		}
		return s, in.checkString(s)
	case InputBoolean:
		b, ok := v.(bool)
		if !ok {
			return "", "must be true or false"
		}
		return strconv.FormatBool(b), ""
	}
	n, ok := v.(json.Number)
	if !ok {
		return "", "must be a number"
	}
	if in.Type == InputInteger {
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return "", "must be an integer within 64 bits"
		}
		return strconv.FormatInt(i, 10), in.checkNumber(float64(i))
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || math.IsInf(f, 0) {
		return "", "must be a finite number"
	}
	return strconv.FormatFloat(f, 'g', -1, 64), in.checkNumber(f)
}

func defaultText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// Call is a tool call made concrete: the argv and standard input of the
// command, and the arguments as they may be recorded (secrets masked).
type Call struct {
	Argv []string
	// RecordArgv is Argv with the values of secret inputs replaced by
	// "(secret)", for logs.
	RecordArgv []string
	// Stdin is the standard input; HasStdin tells an empty input from none.
	Stdin    string
	HasStdin bool
	// Recorded maps each given or defaulted input to its value, with
	// secret inputs replaced by "(secret)".
	Recorded map[string]string
}

// Render checks a call's arguments (a JSON object) against the tool's
// inputs and builds its argv from the command template. Every input value
// stays one argument, or part of one: nothing is split, globbed or given
// to a shell. An argument whose placeholders are all absent optional
// inputs is left out. The error is an *InputError.
func (t *Tool) Render(arguments json.RawMessage) (*Call, error) {
	if len(t.Command) == 0 {
		return nil, &InputError{Reason: "the tool has no command"}
	}
	if len(arguments) > maxArguments {
		return nil, &InputError{Reason: fmt.Sprintf("the arguments are over %d bytes", maxArguments)}
	}
	args := map[string]json.RawMessage{}
	if trimmed := bytes.TrimSpace(arguments); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := json.Unmarshal(trimmed, &args); err != nil {
			return nil, &InputError{Reason: "want a JSON object of input names to values"}
		}
	}
	vals := map[string]string{}
	c := &Call{Recorded: map[string]string{}}
	for i := range t.Inputs {
		in := &t.Inputs[i]
		raw, given := args[in.Name]
		if given && bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			given = false
		}
		var v string
		switch {
		case given:
			var why string
			if v, why = in.value(raw); why != "" {
				return nil, &InputError{Input: in.Name, Reason: why}
			}
		case in.Default != nil:
			v = defaultText(in.Default)
		case in.Required:
			return nil, &InputError{Input: in.Name, Reason: "is required"}
		default:
			continue
		}
		vals[in.Name] = v
		if in.Secret {
			c.Recorded[in.Name] = "(secret)"
		} else {
			c.Recorded[in.Name] = v
		}
	}
	for name := range args {
		if !slices.ContainsFunc(t.Inputs, func(in Input) bool { return in.Name == name }) {
			return nil, &InputError{Input: name, Reason: fmt.Sprintf("is not an input of this tool (inputs: %s)", inputNames(t.Inputs))}
		}
	}
	// A group is left out whole when any of its arguments names an
	// absent input.
	dropped := map[int]bool{}
	for _, a := range t.Command {
		if a.Group == 0 {
			continue
		}
		for _, name := range a.Inputs() {
			if _, ok := vals[name]; !ok {
				dropped[a.Group] = true
			}
		}
	}
	afterDashes := false // past a literal "--": no more options
	for _, a := range t.Command {
		if a.Group != 0 && dropped[a.Group] {
			continue
		}
		if len(a.Parts) == 1 && a.Parts[0] == "--" {
			afterDashes = true
		}
		var b, rb strings.Builder
		skip := false
		for j, part := range a.Parts {
			if j%2 == 0 {
				b.WriteString(part)
				rb.WriteString(part)
				continue
			}
			v, ok := vals[part]
			if !ok {
				skip = true
				break
			}
			// An argument that would start with '-' is read as an option
			// by most commands: "--output=/etc/passwd" given for a file
			// name. A literal prefix ("--pattern={p}") keeps it a value,
			// and so does a "--" before it.
			if b.Len() == 0 && strings.HasPrefix(v, "-") && !afterDashes && !t.input(part).AllowDash {
				return nil, &InputError{Input: part, Reason: "must not start with '-' here (it could be taken for an option)"}
			}
			b.WriteString(v)
			rb.WriteString(c.Recorded[part])
		}
		if !skip {
			c.Argv = append(c.Argv, b.String())
			c.RecordArgv = append(c.RecordArgv, rb.String())
		}
	}
	if t.Stdin != "" {
		c.Stdin, c.HasStdin = vals[t.Stdin]
	}
	total := 0
	for _, a := range c.Argv {
		total += len(a) + 1
	}
	if total > 1<<20 {
		return nil, &InputError{Reason: "the command line would be over 1 MiB"}
	}
	return c, nil
}

func (t *Tool) input(name string) *Input {
	for i := range t.Inputs {
		if t.Inputs[i].Name == name {
			return &t.Inputs[i]
		}
	}
	return &Input{}
}
