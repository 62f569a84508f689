package config

import (
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

var inputKeys = []string{"allow_dash", "default", "description", "enum", "max_length", "maximum", "minimum", "required", "secret", "type"}

// Input types, as in JSON Schema.
const (
	InputString  = "string"
	InputInteger = "integer"
	InputNumber  = "number"
	InputBoolean = "boolean"
)

// Bounds of inputs.
const (
	// DefaultMaxLength bounds a string input that sets no max_length.
	DefaultMaxLength = 16 << 10
	// maxMaxLength bounds max_length: a value is one argument, and the
	// kernel's limit on one argument is 128 KiB.
	maxMaxLength = 128<<10 - 1
	maxInputs    = 64
	maxArgs      = 256
)

// Input is one declared input of a tool called through MCP: its value
// becomes whole arguments of the tool's command, never shell text.
type Input struct {
	Name        string
	Type        string // InputString, InputInteger, InputNumber or InputBoolean
	Description string
	Required    bool
	// Secret keeps the value out of the audit log and the tool's result
	// echo; it is still passed to the command.
	Secret bool
	// Default is used when the caller gives none; nil for none. Its type
	// matches Type (string, int64, float64 or bool).
	Default any
	// Enum lists the allowed values of a string input; empty allows any.
	Enum []string
	// MaxLength bounds a string input in bytes.
	MaxLength int
	// Minimum and Maximum bound a number or integer input.
	Minimum, Maximum *float64
	// AllowDash lets a value start with '-'. By default such a value is
	// refused, so that no input can be taken by the command for an option
	// ("--output=/etc/x", "-rf").
	AllowDash bool
	Line      int
}

// Template is an argument of a command template: literal text with
// {input} placeholders.
type Template struct {
	// Parts alternate literal text and input names: Parts[0] is literal,
	// Parts[1] an input name, Parts[2] literal, and so on.
	Parts []string
	// Group, when not 0, joins the arguments written as one nested list
	// in the command ([-o, "{out}"]): they are left out together when
	// any of them names an absent optional input.
	Group int
}

// Inputs returns the names of the inputs the template uses.
func (t Template) Inputs() []string {
	var out []string
	for i := 1; i < len(t.Parts); i += 2 {
		out = append(out, t.Parts[i])
	}
	return out
}

// Whole reports whether the template is a single placeholder and nothing
// else, and which input.
func (t Template) Whole() (string, bool) {
	if len(t.Parts) == 3 && t.Parts[0] == "" && t.Parts[2] == "" {
		return t.Parts[1], true
	}
	return "", false
}

// parseTemplate splits s at its {name} placeholders; "{{" and "}}" are
// literal braces.
func parseTemplate(s string) (Template, error) {
	var t Template
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{', c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte(c)
			i++
		case c == '{':
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return t, fmt.Errorf("unclosed { (write {{ for a literal brace)")
			}
			name := s[i+1 : i+1+end]
			if !validEnvName(name) {
				return t, fmt.Errorf("{%s} is not a placeholder: input names are letters, digits and '_', not starting with a digit (write {{ for a literal brace)", name)
			}
			t.Parts = append(t.Parts, lit.String(), name)
			lit.Reset()
			i += end + 1
		case c == '}':
			return t, fmt.Errorf("unmatched } (write }} for a literal brace)")
		default:
			lit.WriteByte(c)
		}
	}
	t.Parts = append(t.Parts, lit.String())
	return t, nil
}

// command parses a tool's command: a list of argument templates.
func (p *parser) command(n *yaml.Node, at string) ([]Template, []*yaml.Node, error) {
	items, err := p.nonEmptyList(n, at)
	if err != nil {
		return nil, nil, err
	}
	if len(items) > maxArgs {
		return nil, nil, p.errAt(n, at, "%d arguments; at most %d", len(items), maxArgs)
	}
	var out []Template
	var nodes []*yaml.Node
	one := func(item *yaml.Node, sub string, group int) error {
		s, err := p.str(item, sub)
		if err != nil {
			return err
		}
		if strings.IndexByte(s, 0) >= 0 {
			return p.errAt(item, sub, "an argument cannot hold a NUL byte")
		}
		t, err := parseTemplate(s)
		if err != nil {
			return p.wrapAt(item, sub, err)
		}
		t.Group = group
		out = append(out, t)
		nodes = append(nodes, item)
		return nil
	}
	for i, item := range items {
		sub := index(at, i)
		if item.Kind == yaml.SequenceNode {
			// A group: arguments left out together ([-o, "{out}"]).
			if i == 0 {
				return nil, nil, p.errAt(item, sub, "the command itself cannot be a group; name a program")
			}
			members, err := p.nonEmptyList(item, sub)
			if err != nil {
				return nil, nil, err
			}
			for j, m := range members {
				if err := one(m, index(sub, j), i); err != nil {
					return nil, nil, err
				}
			}
			continue
		}
		if err := one(item, sub, 0); err != nil {
			return nil, nil, err
		}
		if i == 0 && len(out[0].Parts) > 1 {
			return nil, nil, p.errAt(item, sub, "the command itself cannot be an input; name a program")
		}
	}
	if len(out) > maxArgs {
		return nil, nil, p.errAt(n, at, "%d arguments; at most %d", len(out), maxArgs)
	}
	if out[0].Parts[0] == "" {
		return nil, nil, p.errAt(items[0], index(at, 0), "the command is empty")
	}
	return out, nodes, nil
}

// inputs parses a tool's inputs mapping, in file order.
func (p *parser) inputs(n *yaml.Node, at string) ([]Input, error) {
	fs, err := p.fields(n, at, "a mapping of input names to their settings", nil)
	if err != nil {
		return nil, err
	}
	if len(fs) > maxInputs {
		return nil, p.errAt(n, at, "%d inputs; at most %d", len(fs), maxInputs)
	}
	var out []Input
	for _, f := range fs {
		in, err := p.input(f, join(at, f.name))
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

func (p *parser) input(f field, at string) (Input, error) {
	in := Input{Name: f.name, Type: InputString, Line: f.key.Line}
	if !validEnvName(f.name) || len(f.name) > 64 {
		return in, p.errAt(f.key, at, "invalid input name %s: use up to 64 letters, digits and '_', not starting with a digit", quote(f.name))
	}
	fs, err := p.fields(f.val, at, "a mapping of input settings", inputKeys)
	if err != nil {
		return in, err
	}
	// The type decides how default, enum and the bounds are read.
	for _, g := range fs {
		if g.name == "type" {
			if in.Type, err = p.str(g.val, join(at, "type")); err != nil {
				return in, err
			}
			switch in.Type {
			case InputString, InputInteger, InputNumber, InputBoolean:
			default:
				return in, p.errAt(g.val, join(at, "type"), "%s: want string, integer, number or boolean", quote(in.Type))
			}
		}
	}
	var defNode, maxLenNode *yaml.Node
	for _, g := range fs {
		sub := join(at, g.name)
		switch g.name {
		case "description":
			in.Description, err = p.str(g.val, sub)
		case "required":
			in.Required, err = p.boolean(g.val, sub)
		case "secret":
			in.Secret, err = p.boolean(g.val, sub)
		case "allow_dash":
			in.AllowDash, err = p.boolean(g.val, sub)
		case "enum":
			if in.Type != InputString {
				return in, p.errAt(g.val, sub, "enum is for string inputs")
			}
			in.Enum, err = p.distinct(g.val, sub, nil)
		case "max_length":
			if in.Type != InputString {
				return in, p.errAt(g.val, sub, "max_length is for string inputs")
			}
			var v int64
			v, err = p.integer(g.val, sub, 1, maxMaxLength)
			in.MaxLength, maxLenNode = int(v), g.val
		case "minimum", "maximum":
			if in.Type != InputInteger && in.Type != InputNumber {
				return in, p.errAt(g.val, sub, "%s is for integer and number inputs", g.name)
			}
			var v float64
			if v, err = p.float(g.val, sub); err == nil {
				if g.name == "minimum" {
					in.Minimum = &v
				} else {
					in.Maximum = &v
				}
			}
		case "default":
			defNode = g.val
		}
		if err != nil {
			return in, err
		}
	}
	if in.Type == InputString && in.MaxLength == 0 {
		in.MaxLength = DefaultMaxLength
	}
	if in.Minimum != nil && in.Maximum != nil && *in.Minimum > *in.Maximum {
		return in, p.errAt(f.val, at, "minimum is above maximum")
	}
	for _, e := range in.Enum {
		if len(e) > in.MaxLength && maxLenNode != nil {
			return in, p.errAt(maxLenNode, join(at, "max_length"), "enum value %s is longer than max_length", quote(e))
		}
	}
	if defNode != nil {
		sub := join(at, "default")
		if in.Required {
			return in, p.errAt(defNode, sub, "a required input cannot have a default")
		}
		var s string
		if s, err = p.str(defNode, sub); err != nil {
			return in, err
		}
		v, why := in.Check(s)
		if why != "" {
			return in, p.errAt(defNode, sub, "default %s: %s", quote(s), why)
		}
		in.Default = v
	}
	return in, nil
}

// float parses a finite number.
func (p *parser) float(n *yaml.Node, at string) (float64, error) {
	s, err := p.str(n, at)
	if err != nil {
		return 0, err
	}
	var v float64
	if _, err := fmt.Sscanf(s, "%g", &v); err != nil || math.IsInf(v, 0) || math.IsNaN(v) || fmt.Sprint(v) == "" {
		return 0, p.errAt(n, at, "%s is not a number", quote(s))
	}
	return v, nil
}

// checkInputs checks that a tool's command and stdin name only declared
// inputs, and that every input is used.
func (p *parser) checkInputs(t *Tool, cmdNodes []*yaml.Node, stdinNode *yaml.Node, at string) error {
	declared := map[string]bool{}
	for _, in := range t.Inputs {
		declared[in.Name] = true
	}
	used := map[string]bool{}
	for i, a := range t.Command {
		for _, name := range a.Inputs() {
			if !declared[name] {
				return p.errAt(cmdNodes[i], index(join(at, "command"), i), "{%s} names no input of the tool (inputs: %s)", name, inputNames(t.Inputs))
			}
			used[name] = true
		}
	}
	if t.Stdin != "" {
		if !declared[t.Stdin] {
			return p.errAt(stdinNode, join(at, "stdin"), "{%s} names no input of the tool (inputs: %s)", t.Stdin, inputNames(t.Inputs))
		}
		used[t.Stdin] = true
	}
	// An argument that may be left out (it names an optional input with
	// no default) must not follow a literal option: the option would take
	// the next argument instead, a caller's value meant for something
	// else ([curl, -o, "{out}", "{url}"] without out runs curl -o URL).
	// A group takes its option with it.
	for i, a := range t.Command {
		if i == 0 || a.Group != 0 || !t.mayDrop(a) {
			continue
		}
		prev := t.Command[i-1]
		if len(prev.Parts) == 1 && strings.HasPrefix(prev.Parts[0], "-") && prev.Parts[0] != "--" && prev.Parts[0] != "-" {
			names := a.Inputs()
			return p.errAt(cmdNodes[i], index(join(at, "command"), i), "{%s} is optional and is left out when absent, which would leave %s before it to take the next argument; write the two as one group, [%s, %q], which is left out together, or make the input required or give it a default",
				names[0], quote(prev.Parts[0]), prev.Parts[0], "{"+names[0]+"}")
		}
	}
	for _, in := range t.Inputs {
		if !used[in.Name] {
			return p.errLine(in.Line, join(join(at, "inputs"), in.Name), "input %s is not used by command or stdin", quote(in.Name))
		}
	}
	if len(t.Inputs) > 0 && len(t.Command) == 0 {
		return p.errLine(t.Line, join(at, "inputs"), "inputs need a command that uses them")
	}
	return nil
}

func inputNames(ins []Input) string {
	if len(ins) == 0 {
		return "none"
	}
	var names []string
	for _, in := range ins {
		names = append(names, in.Name)
	}
	return strings.Join(names, ", ")
}

// errLine returns an *Error located at a line.
func (p *parser) errLine(line int, field, format string, args ...any) *Error {
	e := p.errAt(nil, field, format, args...)
	e.Line = line
	return e
}

// mayDrop reports whether argument a is left out of some call: it names an
// input that is neither required nor defaulted.
func (t *Tool) mayDrop(a Template) bool {
	for _, name := range a.Inputs() {
		if in := t.input(name); in != nil && !in.Required && in.Default == nil {
			return true
		}
	}
	return false
}
