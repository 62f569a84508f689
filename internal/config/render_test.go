package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const grepTool = `
tools:
  grep:
    description: search text
    command: [grep, "--max-count={count}", "{flags}", -e, "{pattern}", "--", "{file}"]
    stdin: "{text}"
    inputs:
      pattern: {type: string, required: true, description: what to look for, allow_dash: true}
      file: {type: string, default: "-"}
      count: {type: integer, minimum: 1, maximum: 100, default: "10"}
      flags: {type: string, enum: [-i, -v, -w], allow_dash: true}
      text: {type: string, max_length: 64}
      token: {type: string, secret: true}
    env: {}
  echo:
    command: [echo, "{word}", "{n}", "{b}", "{{literal}}"]
    inputs:
      word: {}
      n: {type: number}
      b: {type: boolean}
`

func TestRenderInputs(t *testing.T) {
	// token is declared but unused: refused; drop it for this table.
	c, err := Parse("a.yaml", []byte(strings.Replace(grepTool, "      token: {type: string, secret: true}\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	grep, echo := c.Tools["grep"], c.Tools["echo"]
	tests := []struct {
		name  string
		tool  *Tool
		args  string
		argv  string // joined with |
		stdin string
		input string // the refused input, or "-" for none
		why   string
	}{
		{"defaults", grep, `{"pattern":"x"}`, "grep|--max-count=10|-e|x|--|-", "", "-", ""},
		{"all", grep, `{"pattern":"a b; rm -rf /","count":3,"flags":"-i","text":"hay\nneedle","file":"f.txt"}`, "grep|--max-count=3|-i|-e|a b; rm -rf /|--|f.txt", "hay\nneedle", "-", ""},
		{"shell metacharacters stay one argument", echo, `{"word":"$(id) ` + "`id`" + ` | tee /x && *"}`, "echo|$(id) `id` | tee /x && *|{literal}", "", "-", ""},
		{"option-looking value", echo, `{"word":"--help"}`, "", "", "word", "must not start with '-'"},
		{"option-looking value after a literal prefix is fine", grep, `{"pattern":"p","count":5}`, "grep|--max-count=5|-e|p|--|-", "", "-", ""},
		{"missing required", grep, `{}`, "", "", "pattern", "is required"},
		{"unknown input", grep, `{"pattern":"x","exec":"y"}`, "", "", "exec", "is not an input of this tool"},
		{"wrong type", grep, `{"pattern":5}`, "", "", "pattern", "must be a string"},
		{"integer with fraction", grep, `{"pattern":"x","count":1.5}`, "", "", "count", "must be an integer"},
		{"integer as string", grep, `{"pattern":"x","count":"3"}`, "", "", "count", "must be a number"},
		{"below minimum", grep, `{"pattern":"x","count":0}`, "", "", "count", "below the minimum 1"},
		{"huge integer", grep, `{"pattern":"x","count":1e400}`, "", "", "count", ""},
		{"not in enum", grep, `{"pattern":"x","flags":"-r"}`, "", "", "flags", "must be one of -i, -v, -w"},
		{"too long", grep, `{"pattern":"x","text":"` + strings.Repeat("a", 65) + `"}`, "", "", "text", "65 bytes; at most 64"},
		{"huge value", echo, `{"word":"` + strings.Repeat("a", 20000) + `"}`, "", "", "word", "at most 16384"},
		{"NUL", echo, `{"word":"a\u0000b"}`, "", "", "word", "NUL"},
		{"not an object", echo, `["a"]`, "", "", "", "JSON object"},
		{"null arguments", echo, `null`, "echo|{literal}", "", "-", ""},
		{"null value is absent", echo, `{"word":null}`, "echo|{literal}", "", "-", ""},
		{"number and boolean", echo, `{"word":"w","n":2.50,"b":true}`, "echo|w|2.5|true|{literal}", "", "-", ""},
		{"negative number alone", echo, `{"n":-1}`, "", "", "n", "must not start with '-'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, err := tt.tool.Render(json.RawMessage(tt.args))
			if tt.input == "-" {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(call.Argv, "|"); got != tt.argv {
					t.Errorf("argv %q, want %q", got, tt.argv)
				}
				if call.Stdin != tt.stdin {
					t.Errorf("stdin %q, want %q", call.Stdin, tt.stdin)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v (%+v), want an *InputError", err, call)
			}
			if ie.Input != tt.input || !strings.Contains(ie.Error(), tt.why) {
				t.Errorf("err = %v (input %q), want input %q and %q", err, ie.Input, tt.input, tt.why)
			}
		})
	}
}

func TestRenderRecordsNoSecret(t *testing.T) {
	c, err := Parse("a.yaml", []byte("tools:\n  t:\n    command: [curl, -H, \"Authorization: {token}\", \"{url}\"]\n    inputs:\n      token: {secret: true, required: true}\n      url: {required: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	call, err := c.Tools["t"].Render(json.RawMessage(`{"token":"s3cr3t","url":"https://x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if call.Argv[2] != "Authorization: s3cr3t" || call.Recorded["token"] != "(secret)" || call.Recorded["url"] != "https://x" || call.RecordArgv[2] != "Authorization: (secret)" || call.RecordArgv[3] != "https://x" {
		t.Fatalf("call %+v", call)
	}
}

func TestInputsInvalid(t *testing.T) {
	tests := []struct{ name, tool, want string }{
		{"undeclared placeholder", "command: [echo, \"{x}\"]", `{x} names no input of the tool`},
		{"unused input", "command: [echo]\n    inputs: {x: {}}", `input "x" is not used`},
		{"inputs without command", "inputs: {x: {}}", `input "x" is not used`},
		{"program from an input", "command: [\"{x}\"]\n    inputs: {x: {}}", "the command itself cannot be an input"},
		{"unclosed brace", "command: [echo, \"{x\"]", "unclosed {"},
		{"bad placeholder", "command: [echo, \"{a b}\"]", "is not a placeholder"},
		{"stray brace", "command: [echo, \"a}\"]", "unmatched }"},
		{"stdin not whole", "command: [cat]\n    stdin: \"x{t}\"\n    inputs: {t: {}}", "stdin is one whole input"},
		{"bad type", "command: [echo, \"{x}\"]\n    inputs: {x: {type: list}}", "want string, integer, number or boolean"},
		{"enum on integer", "command: [echo, \"{x}\"]\n    inputs: {x: {type: integer, enum: [a]}}", "enum is for string inputs"},
		{"default of wrong type", "command: [echo, \"{x}\"]\n    inputs: {x: {type: integer, default: abc}}", "not an integer"},
		{"default out of enum", "command: [echo, \"{x}\"]\n    inputs: {x: {enum: [a], default: b}}", "must be one of a"},
		{"required with default", "command: [echo, \"{x}\"]\n    inputs: {x: {required: true, default: a}}", "cannot have a default"},
		{"min above max", "command: [echo, \"{x}\"]\n    inputs: {x: {type: number, minimum: 5, maximum: 1}}", "minimum is above maximum"},
		{"max_length too big", "command: [echo, \"{x}\"]\n    inputs: {x: {max_length: 1000000}}", "max_length"},
		{"unknown input key", "command: [echo, \"{x}\"]\n    inputs: {x: {requird: true}}", `unknown field "requird"`},
		{"bad input name", "command: [echo, \"{x}\"]\n    inputs: {x: {}, \"a-b\": {}}", "invalid input name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("a.yaml", []byte("tools:\n  t:\n    "+tt.tool+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzRender checks that no arguments make Render panic, and that what it
// accepts keeps every argument free of NUL and the program fixed.
func FuzzRender(f *testing.F) {
	c, err := Parse("a.yaml", []byte(strings.Replace(grepTool, "      token: {type: string, secret: true}\n", "", 1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"pattern":"x","count":3,"flags":"-i"}`))
	f.Add([]byte(`{"word":"--x","n":-0,"b":false}`))
	f.Add([]byte(`{"pattern":"\u0000"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, args []byte) {
		for _, tool := range []*Tool{c.Tools["grep"], c.Tools["echo"]} {
			call, err := tool.Render(args)
			if err != nil {
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Fatalf("error %v is not an *InputError", err)
				}
				continue
			}
			if call.Argv[0] != tool.Command[0].Parts[0] {
				t.Fatalf("program became %q", call.Argv[0])
			}
			for _, a := range call.Argv {
				if strings.IndexByte(a, 0) >= 0 {
					t.Fatalf("an argument holds NUL: %q", a)
				}
			}
		}
	})
}

func TestMountsConfig(t *testing.T) {
	c, err := Parse("a.yaml", []byte("tools:\n  t:\n    mounts:\n      - {source: /usr/share, target: /srv/share}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Tools["t"].Mounts; len(m) != 1 || m[0].Source != "/usr/share" || m[0].Target != "/srv/share" {
		t.Fatalf("mounts %+v", m)
	}
	for _, tt := range []struct{ in, want string }{
		{"[{source: /usr/share, target: /etc/x}]", "4:8: tools.t.mounts[0]: mount target \"/etc/x\": /etc is built by airlock"},
		{"[{source: /nonexistent-airlock, target: /srv/x}]", "mount source"},
		{"[{source: /usr/share}]", "needs source and target"},
		{"[{source: /usr/share, target: /srv/a}, {source: /usr/lib, target: /srv/a}]", "two mounts at"},
		{"[{src: /usr/share, target: /srv/a}]", `unknown field "src"`},
	} {
		_, err := Parse("a.yaml", []byte("tools:\n  t:\n    mounts:\n      "+tt.in+"\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.in, err, tt.want)
		}
	}
}

// TestOptionalArgumentTakesItsOption: an optional argument left out must
// not leave a literal option before it to take the caller's next value.
// Such a template is refused when the config loads; written as a group,
// the option goes with it.
func TestOptionalArgumentTakesItsOption(t *testing.T) {
	const shifted = "tools:\n  dl:\n    command: [curl, -o, \"{out}\", \"{url}\"]\n    inputs:\n      out: {}\n      url: {required: true}\n"
	_, err := Parse("a.yaml", []byte(shifted))
	if err == nil || !strings.Contains(err.Error(), `tools.dl.command[2]`) || !strings.Contains(err.Error(), `[-o, "{out}"]`) {
		t.Fatalf("a template whose option would take the next argument: %v", err)
	}
	for _, fixed := range []string{
		strings.Replace(shifted, "      out: {}\n", "      out: {required: true}\n", 1),
		strings.Replace(shifted, "      out: {}\n", "      out: {default: out.bin}\n", 1),
	} {
		if _, err := Parse("a.yaml", []byte(fixed)); err != nil {
			t.Fatalf("a required or defaulted input: %v", err)
		}
	}
	c, err := Parse("a.yaml", []byte(strings.Replace(shifted, `[curl, -o, "{out}", "{url}"]`, `[curl, [-o, "{out}"], "{url}"]`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args string
		want []string
	}{
		{`{"url": "https://a.example/x"}`, []string{"curl", "https://a.example/x"}},
		{`{"url": "https://a.example/x", "out": "x.bin"}`, []string{"curl", "-o", "x.bin", "https://a.example/x"}},
	} {
		call, err := c.Tools["dl"].Render(json.RawMessage(tt.args))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(call.Argv, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%s: argv %q, want %q", tt.args, call.Argv, tt.want)
		}
	}
	if _, err := Parse("a.yaml", []byte("tools:\n  g:\n    command: [[x, y]]\n")); err == nil || !strings.Contains(err.Error(), "cannot be a group") {
		t.Errorf("a group as the command: %v", err)
	}
}
