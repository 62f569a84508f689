package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds on the shape of a file. A real airlock.yaml has a few hundred
// nodes and a nesting depth below ten; the bounds stop a hostile or broken
// file from making later passes expensive.
const (
	// MaxNodes is the most YAML nodes (keys, values, list items) a file
	// may have.
	MaxNodes = 100_000
	// MaxDepth is the deepest a file may nest mappings and lists.
	MaxDepth = 64
)

// standardTags are the only tags a file may write explicitly. Others
// (!!binary, !!timestamp, !!set, application tags such as !secret) would
// suggest a meaning this package does not give them.
var standardTags = map[string]yaml.Kind{
	"!!str":   yaml.ScalarNode,
	"!!int":   yaml.ScalarNode,
	"!!bool":  yaml.ScalarNode,
	"!!float": yaml.ScalarNode,
	"!!null":  yaml.ScalarNode,
	"!!map":   yaml.MappingNode,
	"!!seq":   yaml.SequenceNode,
}

// parser holds the state of one Parse.
type parser struct {
	file  string
	nodes int // nodes seen by checkTree
	// Names used before the whole file is read, checked by checkRefs.
	secretRefs  []secretRef
	serviceRefs []serviceRefs
	toolRefs    []toolRef
	buildTool   *toolRef // builds.tool, which must be a tool (not an MCP server)
}

// errAt returns an *Error located at n.
func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = max(n.Line, 0), max(n.Column, 0)
	}
	return e
}

// wrapAt returns an *Error located at n whose message is err's.
func (p *parser) wrapAt(n *yaml.Node, field string, err error) *Error {
	e := p.errAt(n, field, "")
	e.Err = err
	return e
}

// checkTree walks the whole tree once, before anything is interpreted, and
// refuses what the rest of the parser should never have to think about:
// too many nodes, too deep nesting, anchors and aliases, and unusual tags.
//
// Aliases are refused rather than expanded because expansion is how the
// "billion laughs" attack turns a small file into a huge tree, and because
// a config file that shares values by reference is hard to review.
func (p *parser) checkTree(n *yaml.Node, path string, depth int) error {
	p.nodes++
	if p.nodes > MaxNodes {
		return p.errAt(n, path, "the file has more than %d YAML nodes", MaxNodes)
	}
	if depth > MaxDepth {
		return p.errAt(n, path, "nested more than %d levels deep", MaxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return p.errAt(n, path, "YAML aliases (*%s) are not supported; write the value out", n.Value)
	}
	if n.Anchor != "" {
		return p.errAt(n, path, "YAML anchors (&%s) are not supported", n.Anchor)
	}
	if n.Style&yaml.TaggedStyle != 0 {
		kind, ok := standardTags[n.Tag]
		if !ok {
			return p.errAt(n, path, "unsupported YAML tag %s (allowed: !!bool, !!float, !!int, !!map, !!null, !!seq, !!str)", quote(n.Tag))
		}
		if kind != n.Kind {
			return p.errAt(n, path, "YAML tag %s does not fit %s", n.Tag, describe(n))
		}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := p.checkTree(c, path, depth); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := p.checkTree(c, index(path, i), depth+1); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := join(path, "?")
			if k.Kind == yaml.ScalarNode {
				sub = join(path, k.Value)
			}
			if err := p.checkTree(k, sub, depth+1); err != nil {
				return err
			}
			if err := p.checkTree(v, sub, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// join appends a mapping key to a field path. Keys made only of letters,
// digits, '_' and '-' are joined with a dot; others are quoted in brackets
// so that a path is unambiguous and cannot carry control characters.
func join(path, key string) string {
	if key == "" || strings.IndexFunc(key, func(r rune) bool { return !isNameChar(r) }) >= 0 {
		return path + "[" + quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a list index to a field path.
func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// isNameChar reports whether r may appear in a tool name.
func isNameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// isNull reports whether n is a YAML null: nothing at all, "~" or "null",
// unquoted.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n) && n.Value == "":
		return "nothing"
	case isNull(n):
		return "null"
	case n.Kind == yaml.ScalarNode:
		return quote(n.Value)
	}
	return "an unexpected YAML node"
}

// field is one key: value pair of a mapping.
type field struct {
	key, val *yaml.Node
	name     string // the key's text
}

// fields returns the pairs of the mapping n in file order. A null n (the
// key was written with nothing after it) is an empty mapping. Keys must be
// scalars and unique; if allowed is not nil they must also be among
// allowed, which is sorted.
func (p *parser) fields(n *yaml.Node, path, what string, allowed []string) ([]field, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, path, "expected %s, got %s", what, describe(n))
	}
	var out []field
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.errAt(k, path, "a key must be a plain name, got %s", describe(k))
		}
		name := k.Value
		sub := join(path, name)
		if name == "<<" && k.Tag == "!!merge" {
			return nil, p.errAt(k, path, "YAML merge keys (<<) are not supported")
		}
		if line, dup := seen[name]; dup {
			return nil, p.errAt(k, sub, "duplicate key %s (first on line %d)", quote(name), line)
		}
		seen[name] = k.Line
		if allowed != nil && !slices.Contains(allowed, name) {
			return nil, p.errAt(k, sub, "unknown field %s (%sallowed: %s)", quote(name), suggest(name, allowed), strings.Join(allowed, ", "))
		}
		out = append(out, field{key: k, val: v, name: name})
	}
	return out, nil
}

// suggest returns a "did you mean" hint for a near miss such as "cpu-time"
// or "Memory", or "".
func suggest(name string, allowed []string) string {
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	if norm != name && slices.Contains(allowed, norm) {
		return fmt.Sprintf("did you mean %q? ", norm)
	}
	return ""
}

// list returns the items of the list n. A null n is an empty list.
func (p *parser) list(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n, path, "expected a list, got %s", describe(n))
	}
	return n.Content, nil
}

// str returns the text of the scalar n. Any scalar is accepted and its
// text kept as written (so 5 is "5" and 1.50 is "1.50"), but null is not:
// an empty value is almost always a mistake, and "" says so explicitly. A
// NUL byte is refused because it would silently cut the value short once it
// reaches a C string.
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errAt(n, path, "expected a string, got %s", describe(n))
	}
	if isNull(n) {
		return "", p.errAt(n, path, `expected a string, got %s (write "" for an empty string)`, describe(n))
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		return "", p.errAt(n, path, "%s contains a NUL byte", quote(n.Value))
	}
	return n.Value, nil
}

// integer reads a whole number in lo..hi. Only plain decimal is accepted:
// no sign, exponent, fraction, digit separator, leading zero, hexadecimal
// or octal, so that YAML 1.1 readings such as 010 = 8 cannot surprise.
func (p *parser) integer(n *yaml.Node, path string, lo, hi int64) (int64, error) {
	s, err := p.str(n, path)
	if err != nil {
		if n.Kind == yaml.ScalarNode {
			return 0, p.errAt(n, path, "expected a whole number, got %s", describe(n))
		}
		return 0, err
	}
	v, ok := parseDecimal(s)
	switch {
	case !ok:
		return 0, p.errAt(n, path, "invalid number %s: want a whole number in decimal, such as %d", quote(s), max(lo, 1))
	case v < lo || v > hi:
		return 0, p.errAt(n, path, "%s is out of range (%d..%d)", quote(s), lo, hi)
	}
	return v, nil
}

// parseDecimal parses digits without a leading zero. Values too large for
// an int64 come back as math.MaxInt64 with ok true, to be rejected by
// the caller's range check.
func parseDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (1<<63-1-9)/10 {
			v = 1<<63 - 1
			continue
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// boolean reads true or false. The YAML 1.1 spellings yes, no, on, off
// and their capitalised forms are refused: they are exactly the values that
// mean different things to different YAML libraries.
func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		switch n.Value {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, p.errAt(n, path, "expected true or false, got %s", describe(n))
}
