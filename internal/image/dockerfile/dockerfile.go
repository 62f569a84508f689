// Package dockerfile parses the Dockerfiles `airlock image build` takes
// (issue 38): the instructions people write most — FROM, RUN (shell and
// exec form), COPY and ADD of files from the context (with --chown and
// --chmod), ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT and LABEL — into
// steps, with build arguments and variables substituted where Docker
// substitutes them. Anything else is refused by name and line, before a
// build starts: a build never half-understands its file.
//
// The parser only reads text; what a step may do (which files it may
// copy, where its commands may connect) is the builder's to decide.
package dockerfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Bounds on what is parsed: a Dockerfile is small, and a hostile one
// (an E2B template's, a caller's) must not make the parser work without
// end.
const (
	MaxSize  = 1 << 20 // bytes of the file
	MaxSteps = 1000    // instructions
	maxWords = 4096    // words of one instruction
	maxValue = 64 << 10
)

// Error is a refusal, with the line of the instruction it concerns (0
// for the file as a whole).
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return "Dockerfile: " + e.Msg
	}
	return fmt.Sprintf("Dockerfile line %d: %s", e.Line, e.Msg)
}

// Is makes every Error an invalid input (errdefs.ErrInvalid).
func (e *Error) Is(target error) bool { return target == errdefs.ErrInvalid }

func errAt(line int, format string, args ...any) *Error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Kinds of step.
const (
	Run        = "RUN"
	Copy       = "COPY"
	Add        = "ADD"
	Env        = "ENV"
	Arg        = "ARG"
	Workdir    = "WORKDIR"
	User       = "USER"
	Cmd        = "CMD"
	Entrypoint = "ENTRYPOINT"
	Label      = "LABEL"
)

// refused are instructions of Docker's that a build here does not take,
// with why.
var refused = map[string]string{
	"EXPOSE":      "a sandbox's ports are reached through airlock, not published by the image",
	"VOLUME":      "volumes are attached to sessions (docs/api.md), not declared by images",
	"HEALTHCHECK": "airlock does not run health checks in sandboxes",
	"SHELL":       "RUN's shell form always runs /bin/sh -c",
	"STOPSIGNAL":  "airlock ends a sandbox by destroying it",
	"ONBUILD":     "images built here are not used as another build's trigger",
	"MAINTAINER":  "deprecated by Docker; write LABEL maintainer=...",
}

// KV is a name and its value (ENV, LABEL, ARG).
type KV struct {
	Key, Value string
	// HasValue is false for an ARG without a default.
	HasValue bool
}

// Step is one instruction after FROM.
type Step struct {
	Line int
	Kind string
	// Text is the instruction as written (continuations joined), for
	// progress and for a cache key.
	Text string
	// Exec is true for the exec (JSON) form of RUN, CMD and ENTRYPOINT:
	// Args is then the argv; in shell form Args is ["/bin/sh", "-c",
	// the command].
	Exec bool
	Args []string
	// Sources and Dest are COPY's and ADD's, variables substituted;
	// Chown and Chmod their flags ("" when not given).
	Sources []string
	Dest    string
	Chown   string
	Chmod   string
	// Pairs are ENV's, LABEL's and ARG's (one, for ARG), substituted.
	Pairs []KV
	// Value is WORKDIR's directory or USER's user, substituted.
	Value string
	// User is a RUN's own user, never a Dockerfile's (E2B's template
	// steps carry one): "" runs it as the USER in effect.
	User string
}

// File is a parsed Dockerfile.
type File struct {
	// From is the base image, substituted with the build arguments
	// declared before it.
	From     string
	FromLine int
	Steps    []Step
}

// Parse reads a Dockerfile. args are the build's --build-arg values: an
// ARG takes its value from them when given, else its default; a value
// given for no ARG is refused, as a typo would otherwise pass silently.
func Parse(src []byte, args map[string]string) (*File, error) {
	if len(src) > MaxSize {
		return nil, errAt(0, "the file is over %d KiB", MaxSize>>10)
	}
	if !utf8.Valid(src) {
		return nil, errAt(0, "the file is not UTF-8 text")
	}
	lines, err := logicalLines(src)
	if err != nil {
		return nil, err
	}
	p := &parser{args: args, declared: map[string]bool{}, vars: map[string]string{}, global: map[string]string{}}
	f := &File{}
	for _, l := range lines {
		if err := p.instruction(f, l); err != nil {
			return nil, err
		}
	}
	if f.From == "" {
		return nil, errAt(0, "no FROM: a build starts from an image")
	}
	for name := range args {
		if !p.declared[name] {
			return nil, errAt(0, "build argument %q is given but no ARG declares it", name)
		}
	}
	return f, nil
}

// line is one logical line: an instruction with its continuations.
type line struct {
	n    int // the first physical line's number
	text string
}

// logicalLines joins continuations (a line ending in the escape
// character) and drops comments and blank lines, after reading the
// parser directives at the top (escape; syntax is noted and ignored).
func logicalLines(src []byte) ([]line, error) {
	phys := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	escape := byte('\\')
	i := 0
	// Directives: "# key=value" lines at the very top.
	for ; i < len(phys); i++ {
		t := strings.TrimSpace(phys[i])
		body, ok := strings.CutPrefix(t, "#")
		if !ok {
			break
		}
		k, v, isKV := strings.Cut(strings.TrimSpace(body), "=")
		if !isKV {
			break
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "escape":
			switch strings.TrimSpace(v) {
			case "\\":
				escape = '\\'
			case "`":
				escape = '`'
			default:
				return nil, errAt(i+1, "escape=%q: want \\ or `", strings.TrimSpace(v))
			}
		case "syntax", "check":
		default:
			// A comment that looks like one: directives end here.
		}
	}
	var out []line
	var cur strings.Builder
	start := 0
	for ; i < len(phys); i++ {
		raw := phys[i]
		t := strings.TrimSpace(raw)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(t, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		trimmed := strings.TrimRight(raw, " \t")
		if strings.HasSuffix(trimmed, string(escape)) && !strings.HasSuffix(trimmed, string([]byte{escape, escape})) {
			cur.WriteString(strings.TrimSuffix(trimmed, string(escape)))
			if cur.Len() > MaxSize {
				return nil, errAt(start, "the instruction is too long")
			}
			continue
		}
		cur.WriteString(raw)
		out = append(out, line{n: start, text: strings.TrimSpace(cur.String())})
		cur.Reset()
		if len(out) > MaxSteps+1 {
			return nil, errAt(start, "over %d instructions", MaxSteps)
		}
	}
	if cur.Len() > 0 {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, line{n: start, text: t})
		}
	}
	return out, nil
}

type parser struct {
	args map[string]string
	// declared are the ARGs declared anywhere; global the values of
	// those declared before FROM (usable in FROM, and after it only
	// when declared again, as Docker has it).
	declared map[string]bool
	global   map[string]string
	// vars are what substitution sees after FROM: ARGs then ENVs.
	vars map[string]string
	from bool
}

func (p *parser) instruction(f *File, l line) error {
	var word, rest string
	if i := strings.IndexAny(l.text, " \t"); i >= 0 {
		word, rest = l.text[:i], strings.TrimSpace(l.text[i+1:])
	} else {
		word, rest = l.text, ""
	}
	kind := strings.ToUpper(word)
	if why, ok := refused[kind]; ok {
		return errAt(l.n, "%s is not supported: %s", kind, why)
	}
	if kind == "FROM" {
		return p.fromLine(f, l, rest)
	}
	if !p.from && kind != Arg {
		if isKnown(kind) {
			return errAt(l.n, "%s before FROM: only ARG may come before it", kind)
		}
		return errAt(l.n, "unknown instruction %q", word)
	}
	if len(f.Steps) == MaxSteps {
		return errAt(l.n, "over %d instructions", MaxSteps)
	}
	st := Step{Line: l.n, Kind: kind, Text: l.text}
	var err error
	switch kind {
	case Run:
		err = p.command(&st, rest, true)
	case Cmd, Entrypoint:
		err = p.command(&st, rest, false)
	case Copy, Add:
		err = p.copyLine(&st, rest)
	case Env:
		err = p.envLine(&st, rest)
	case Label:
		err = p.labelLine(&st, rest)
	case Arg:
		err = p.argLine(&st, rest)
		if err == nil && !p.from {
			return nil // a global ARG: no step
		}
	case Workdir, User:
		if rest == "" {
			return errAt(l.n, "%s needs a value", kind)
		}
		if strings.HasPrefix(rest, "--") {
			return errAt(l.n, "%s takes no flags", kind)
		}
		// A relative WORKDIR is the builder's to join to the last.
		st.Value, err = p.expand(rest, l.n)
	default:
		return errAt(l.n, "unknown instruction %q", word)
	}
	if err != nil {
		return err
	}
	f.Steps = append(f.Steps, st)
	return nil
}

func isKnown(kind string) bool {
	return slices.Contains([]string{Run, Copy, Add, Env, Arg, Workdir, User, Cmd, Entrypoint, Label}, kind)
}

func (p *parser) fromLine(f *File, l line, rest string) error {
	if p.from {
		return errAt(l.n, "a second FROM: multi-stage builds are not supported")
	}
	fields := strings.Fields(rest)
	if len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		return errAt(l.n, "FROM %s: flags are not supported (the image's platform is the host's)", fields[0])
	}
	switch {
	case len(fields) == 1:
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		// A stage's name: nothing refers to it without multi-stage.
	default:
		return errAt(l.n, "FROM wants an image, optionally followed by AS name")
	}
	img, err := expandWith(fields[0], l.n, p.global)
	if err != nil {
		return err
	}
	if img == "" {
		return errAt(l.n, "FROM %s is empty once substituted", fields[0])
	}
	f.From, f.FromLine = img, l.n
	p.from = true
	return nil
}

// command reads RUN's, CMD's or ENTRYPOINT's argument: a JSON array of
// strings (exec form) or a shell command. Variables are the shell's to
// expand, not the parser's.
func (p *parser) command(st *Step, rest string, run bool) error {
	if rest == "" {
		return errAt(st.Line, "%s needs a command", st.Kind)
	}
	if run && strings.HasPrefix(rest, "--") {
		flag, _, _ := strings.Cut(rest, " ")
		return errAt(st.Line, "RUN %s is not supported (a step's network is the build's allowlist; its mounts are airlock's)", flag)
	}
	if strings.HasPrefix(rest, "<<") {
		return errAt(st.Line, "heredocs are not supported")
	}
	if strings.HasPrefix(rest, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(rest), &argv); err == nil {
			if len(argv) == 0 || argv[0] == "" {
				return errAt(st.Line, "%s [] names no program", st.Kind)
			}
			st.Exec, st.Args = true, argv
			return nil
		}
		// Not JSON: Docker runs it as a shell command, as written.
	}
	st.Args = []string{"/bin/sh", "-c", rest}
	return nil
}

func (p *parser) copyLine(st *Step, rest string) error {
	words, err := splitWords(rest, st.Line)
	if err != nil {
		return err
	}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		flag, val, _ := strings.Cut(words[0], "=")
		switch flag {
		case "--chown":
			if st.Chown, err = p.expand(val, st.Line); err != nil {
				return err
			}
		case "--chmod":
			st.Chmod = val
			if !isOctalMode(val) {
				return errAt(st.Line, "%s --chmod=%s: want an octal mode such as 0755", st.Kind, val)
			}
		case "--from":
			return errAt(st.Line, "%s --from: multi-stage builds are not supported", st.Kind)
		default:
			return errAt(st.Line, "%s %s is not supported", st.Kind, flag)
		}
		words = words[1:]
	}
	// The JSON form: ["src", ..., "dest"].
	if j := strings.TrimSpace(jsonTail(rest)); strings.HasPrefix(j, "[") {
		var arr []string
		if err := json.Unmarshal([]byte(j), &arr); err != nil {
			return errAt(st.Line, "%s's JSON form: %v", st.Kind, err)
		}
		words = arr
	}
	if len(words) < 2 {
		return errAt(st.Line, "%s wants at least one source and a destination", st.Kind)
	}
	for i, w := range words {
		if words[i], err = p.expand(w, st.Line); err != nil {
			return err
		}
	}
	st.Sources, st.Dest = words[:len(words)-1], words[len(words)-1]
	for _, s := range st.Sources {
		if strings.Contains(s, "://") {
			return errAt(st.Line, "%s %s: only files of the build's context are copied (a URL would be a download outside the build's allowlist)", st.Kind, s)
		}
		if s == "" {
			return errAt(st.Line, "%s has an empty source", st.Kind)
		}
	}
	if st.Dest == "" {
		return errAt(st.Line, "%s has an empty destination", st.Kind)
	}
	return nil
}

// jsonTail is what follows COPY's flags.
func jsonTail(rest string) string {
	s := strings.TrimSpace(rest)
	for strings.HasPrefix(s, "--") {
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return ""
		}
		s = strings.TrimSpace(s[i:])
	}
	return s
}

func isOctalMode(s string) bool {
	if s == "" || len(s) > 4 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '7' {
			return false
		}
	}
	return true
}

// envLine reads ENV k=v ... or the legacy ENV k v.
func (p *parser) envLine(st *Step, rest string) error {
	pairs, err := p.pairs(st, rest, true)
	if err != nil {
		return err
	}
	for _, kv := range pairs {
		p.vars[kv.Key] = kv.Value
	}
	st.Pairs = pairs
	return nil
}

func (p *parser) labelLine(st *Step, rest string) error {
	pairs, err := p.pairs(st, rest, false)
	if err != nil {
		return err
	}
	st.Pairs = pairs
	return nil
}

// pairs reads k=v words (values substituted with what came before this
// instruction); legacy allows ENV's "k v" form.
func (p *parser) pairs(st *Step, rest string, legacy bool) ([]KV, error) {
	if rest == "" {
		return nil, errAt(st.Line, "%s needs name=value", st.Kind)
	}
	words, err := splitWords(rest, st.Line)
	if err != nil {
		return nil, err
	}
	if legacy && !strings.Contains(words[0], "=") {
		name, val, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if !validName(name) {
			return nil, errAt(st.Line, "%s %q: not a variable name", st.Kind, name)
		}
		v, err := p.expand(strings.TrimSpace(val), st.Line)
		if err != nil {
			return nil, err
		}
		return []KV{{Key: name, Value: v, HasValue: true}}, nil
	}
	var out []KV
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, errAt(st.Line, "%s %q: want name=value", st.Kind, w)
		}
		if st.Kind == Env && !validName(k) {
			return nil, errAt(st.Line, "%s %q: not a variable name", st.Kind, k)
		}
		if k == "" {
			return nil, errAt(st.Line, "%s has an empty name", st.Kind)
		}
		if v, err = p.expand(v, st.Line); err != nil {
			return nil, err
		}
		out = append(out, KV{Key: k, Value: v, HasValue: true})
	}
	return out, nil
}

func (p *parser) argLine(st *Step, rest string) error {
	words, err := splitWords(rest, st.Line)
	if err != nil {
		return err
	}
	if len(words) != 1 {
		return errAt(st.Line, "ARG declares one name (optionally =default)")
	}
	name, def, has := strings.Cut(words[0], "=")
	if !validName(name) {
		return errAt(st.Line, "ARG %q: not a variable name", name)
	}
	p.declared[name] = true
	scope := p.vars
	if !p.from {
		scope = p.global
	}
	val, given := p.args[name]
	switch {
	case given:
	case has:
		if val, err = expandWith(def, st.Line, scope); err != nil {
			return err
		}
	case p.from:
		// Declared again after FROM: a global ARG's value comes with it.
		val, given = p.global[name]
	}
	if given || has {
		scope[name] = val
	}
	st.Pairs = []KV{{Key: name, Value: val, HasValue: given || has}}
	return nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

func (p *parser) expand(s string, line int) (string, error) { return expandWith(s, line, p.vars) }

// expandWith substitutes $NAME, ${NAME}, ${NAME:-default} and
// ${NAME:+alternative} from vars (unset: empty); \$ is a literal $.
// Quotes are removed as a shell word's are.
func expandWith(s string, line int, vars map[string]string) (string, error) {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && quote != '\'':
			i++
			b.WriteByte(s[i])
		case (c == '"' || c == '\'') && (quote == 0 || quote == c):
			if quote == 0 {
				quote = c
			} else {
				quote = 0
			}
		case c == '$' && quote != '\'' && i+1 < len(s):
			n, v, err := variable(s[i+1:], line, vars)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i += n
		default:
			b.WriteByte(c)
		}
		if b.Len() > maxValue {
			return "", errAt(line, "a value is over %d KiB once substituted", maxValue>>10)
		}
	}
	if quote != 0 {
		return "", errAt(line, "an unterminated %c quote", quote)
	}
	return b.String(), nil
}

// variable reads what follows a $ and returns how many bytes it took and
// its value.
func variable(s string, line int, vars map[string]string) (int, string, error) {
	if s[0] != '{' {
		n := 0
		for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || n > 0 && s[n] >= '0' && s[n] <= '9') {
			n++
		}
		if n == 0 {
			return 0, "$", nil
		}
		return n, vars[s[:n]], nil
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return 0, "", errAt(line, "an unterminated ${")
	}
	body := s[1:end]
	name, op, word := body, "", ""
	if i := strings.Index(body, ":"); i >= 0 {
		name, op = body[:i], body[i:]
		if len(op) < 2 || (op[1] != '-' && op[1] != '+') {
			return 0, "", errAt(line, "${%s}: only ${NAME}, ${NAME:-default} and ${NAME:+alternative} are supported", body)
		}
		op, word = op[:2], op[2:]
	}
	if !validName(name) {
		return 0, "", errAt(line, "${%s}: only ${NAME}, ${NAME:-default} and ${NAME:+alternative} are supported", body)
	}
	v, set := vars[name]
	switch op {
	case ":-":
		if !set || v == "" {
			v = word
		}
	case ":+":
		if set && v != "" {
			v = word
		} else {
			v = ""
		}
	}
	return end + 1, v, nil
}

// splitWords splits on unquoted blanks, keeping quotes and escapes in the
// words (expand removes them).
func splitWords(s string, line int) ([]string, error) {
	var out []string
	var cur bytes.Buffer
	var quote byte
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && quote != '\'':
			cur.WriteByte(c)
			i++
			cur.WriteByte(s[i])
			in = true
		case quote != 0:
			cur.WriteByte(c)
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
			cur.WriteByte(c)
			in = true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
		if len(out) > maxWords {
			return nil, errAt(line, "over %d words", maxWords)
		}
	}
	if quote != 0 {
		return nil, errAt(line, "an unterminated %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
