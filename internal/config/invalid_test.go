package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseInvalid(t *testing.T) {
	// tool wraps settings lines in "tools:\n  t:\n", so they start on line 3.
	tool := func(ls ...string) string {
		return lines(append([]string{"tools:", "  t:"}, ls...)...)
	}
	tests := []struct {
		name      string
		in        string
		line, col int
		field     string
		msg       string
	}{
		// Shape of the file.
		{"top-level list", "- a\n- b\n", 1, 1, "", "expected a mapping at the top level, got a list"},
		{"top-level scalar", "hello\n", 1, 1, "", `expected a mapping at the top level, got "hello"`},
		{"unknown top key", "tool:\n  t: {}\n", 1, 1, "tool", `unknown field "tool" (allowed: tools)`},
		{"tools list", "tools:\n  - a\n", 2, 3, "tools", "expected a mapping of tool names to their settings, got a list"},
		{"tools scalar", "tools: x\n", 1, 8, "tools", `got "x"`},
		{"tool list", "tools:\n  t: [a]\n", 2, 6, "tools.t", "expected a mapping of tool settings, got a list"},
		{"two documents", "tools: {}\n---\ntools: {}\n", 2, 1, "", "more than one YAML document"},
		{"syntax error", "tools:\n  t: {\n", 2, 0, "", "invalid YAML: "},
		{"bad indent", "tools:\n  a: 1\n b: 2\n", 2, 0, "", "invalid YAML: "},
		{"tab indent", "tools:\n\tt: {}\n", 2, 0, "", "invalid YAML: "},
		{"complex key", "tools:\n  ? [a]\n  : {}\n", 2, 5, "tools", "a key must be a plain name, got a list"},
		{"duplicate tool", "tools:\n  t: {}\n  u: {}\n  t: {}\n", 4, 3, "tools.t", `duplicate key "t" (first on line 2)`},
		{"duplicate top", "tools: {}\ntools: {}\n", 2, 1, "tools", "duplicate key \"tools\" (first on line 1)"},

		// YAML features that are refused.
		{"alias", tool("    env: &e {A: b}", "  u:", "    env: *e"), 3, 10, "tools.t.env", "YAML anchors (&e) are not supported"},
		{"alias only", "tools:\n  t:\n    description: *x\n", 0, 0, "", "invalid YAML: unknown anchor 'x' referenced"},
		{"merge key", tool("    <<: {}"), 3, 5, "tools.t", "YAML merge keys (<<) are not supported"},
		{"custom tag", tool("    description: !secret x"), 3, 18, "tools.t.description", `unsupported YAML tag "!secret"`},
		{"binary tag", tool("    description: !!binary aGk="), 3, 18, "tools.t.description", `unsupported YAML tag "!!binary"`},
		{"timestamp tag", tool("    description: !!timestamp 2001-01-01"), 3, 18, "tools.t.description", `unsupported YAML tag "!!timestamp"`},
		{"map tag on scalar", tool("    description: !!map x"), 3, 18, "tools.t.description", "YAML tag !!map does not fit"},
		{"set tag", tool("    env: !!set {A: b}"), 3, 10, "tools.t.env", `unsupported YAML tag "!!set"`},
		{"too deep", "tools:\n  t:\n    env:\n      A: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\n", 4, 71, "tools.t.env.A" + strings.Repeat("[0]", 61), "nested more than 64 levels deep"},
		{"too many nodes", "tools:\n  t:\n    egress: [" + strings.Repeat("a,", MaxNodes) + "]\n", 3, 14 + 2*(MaxNodes-7), "tools.t.egress[99993]", "more than 100000 YAML nodes"},

		// Tool names.
		{"name underscore first", "tools:\n  _t: {}\n", 2, 3, "tools._t", `invalid tool name "_t"`},
		{"name dash first", "tools:\n  -t: {}\n", 2, 3, "tools.-t", `invalid tool name "-t"`},
		{"name dot", "tools:\n  a.b: {}\n", 2, 3, `tools["a.b"]`, `invalid tool name "a.b"`},
		{"name newline", "tools:\n  \"a\\nb\": {}\n", 2, 3, `tools["a\nb"]`, `invalid tool name "a\nb"`},
		{"name empty", "tools:\n  \"\": {}\n", 2, 3, `tools[""]`, `invalid tool name ""`},
		{"name too long", "tools:\n  " + strings.Repeat("a", 65) + ": {}\n", 2, 3, "tools." + strings.Repeat("a", 65), "invalid tool name"},

		// Tool settings.
		{"unknown tool key", tool("    memory: 1GiB"), 3, 5, "tools.t.memory", `unknown field "memory" (allowed: description, egress, env, image, limits, network, workdir)`},
		{"description list", tool("    description: [a]"), 3, 18, "tools.t.description", "expected a string, got a list"},
		{"description null", tool("    description:"), 3, 17, "tools.t.description", `expected a string, got nothing (write "" for an empty string)`},
		{"description nul", tool(`    description: "a\0b"`), 3, 18, "tools.t.description", "contains a NUL byte"},
		{"image unknown", tool("    image: ubuntu"), 3, 12, "tools.t.image", `unknown image "ubuntu" (known: host)`},
		{"workdir relative", tool("    workdir: work"), 3, 14, "tools.t.workdir", `"work" is not an absolute path`},
		{"workdir dotdot", tool("    workdir: /a/../b"), 3, 14, "tools.t.workdir", `"/a/../b" is not a clean path`},
		{"workdir trailing slash", tool("    workdir: /a/"), 3, 14, "tools.t.workdir", "is not a clean path"},
		{"workdir double slash", tool("    workdir: /a//b"), 3, 14, "tools.t.workdir", "is not a clean path"},
		{"workdir too long", tool("    workdir: /" + strings.Repeat("a", 4095)), 3, 14, "tools.t.workdir", "longer than 4095 bytes"},

		// env.
		{"env list", tool("    env: [A=b]"), 3, 10, "tools.t.env", "expected a mapping of NAME: value, got a list"},
		{"env bad name", tool("    env:", "      1A: x"), 4, 7, "tools.t.env.1A", `invalid environment variable name "1A"`},
		{"env dash name", tool("    env:", "      A-B: x"), 4, 7, "tools.t.env.A-B", `invalid environment variable name "A-B"`},
		{"env equals name", tool("    env:", `      "A=B": x`), 4, 7, `tools.t.env["A=B"]`, "invalid environment variable name"},
		{"env null", tool("    env:", "      A:"), 4, 9, "tools.t.env.A", "expected a string, got nothing"},
		{"env tilde", tool("    env:", "      A: ~"), 4, 10, "tools.t.env.A", "expected a string, got null"},
		{"env map value", tool("    env:", "      A: {b: c}"), 4, 10, "tools.t.env.A", "expected a string, got a mapping"},
		{"env nul", tool("    env:", `      A: "x\0"`), 4, 10, "tools.t.env.A", "contains a NUL byte"},
		{"env duplicate", tool("    env:", "      A: x", "      A: y"), 5, 7, "tools.t.env.A", "duplicate key \"A\" (first on line 4)"},

		// limits.
		{"limits typo", tool("    limits:", "      memery: 1GiB"), 4, 7, "tools.t.limits.memery", `unknown field "memery" (allowed: cpu, cpu_time, disk, fds, memory, output, pids, time)`},
		{"limits dash", tool("    limits:", "      cpu-time: 1s"), 4, 7, "tools.t.limits.cpu-time", `unknown field "cpu-time" (did you mean "cpu_time"? allowed:`},
		{"limits list", tool("    limits: [1]"), 3, 13, "tools.t.limits", "expected a mapping of limit names to values, got a list"},
		{"memory unit", tool("    limits:", "      memory: 12QB"), 4, 15, "tools.t.limits.memory", `invalid size "12QB": unknown unit "QB"`},
		{"memory map", tool("    limits:", "      memory: {a: 1}"), 4, 15, "tools.t.limits.memory", "expected a string, got a mapping"},
		{"memory null", tool("    limits:", "      memory:"), 4, 14, "tools.t.limits.memory", "expected a string, got nothing"},
		{"memory too small", tool("    limits:", "      memory: 1MiB"), 3, 5, "tools.t.limits", "memory: 1048576 bytes is below the minimum"},
		{"two too small", tool("    limits:", "      memory: 1", "      disk: 1"), 3, 5, "tools.t.limits", "is below the minimum of 8388608; disk: 1 bytes"},
		{"pids fraction", tool("    limits:", "      pids: 12.5"), 4, 13, "tools.t.limits.pids", `invalid number "12.5": want a whole number in decimal`},
		{"pids negative", tool("    limits:", "      pids: -1"), 4, 13, "tools.t.limits.pids", `invalid number "-1"`},
		{"pids exponent", tool("    limits:", "      pids: 1e3"), 4, 13, "tools.t.limits.pids", `invalid number "1e3"`},
		{"pids hex", tool("    limits:", "      pids: 0x40"), 4, 13, "tools.t.limits.pids", `invalid number "0x40"`},
		{"pids octal", tool("    limits:", "      pids: 010"), 4, 13, "tools.t.limits.pids", `invalid number "010"`},
		{"pids separator", tool("    limits:", "      pids: 1_000"), 4, 13, "tools.t.limits.pids", `invalid number "1_000"`},
		{"pids zero", tool("    limits:", "      pids: 0"), 4, 13, "tools.t.limits.pids", `"0" is out of range (1..4611686018427387904)`},
		{"pids huge", tool("    limits:", "      pids: 99999999999999999999999"), 4, 13, "tools.t.limits.pids", "is out of range"},
		{"pids bool", tool("    limits:", "      pids: true"), 4, 13, "tools.t.limits.pids", `invalid number "true"`},
		{"pids null", tool("    limits:", "      pids: null"), 4, 13, "tools.t.limits.pids", "expected a whole number, got null"},
		{"pids below sandbox minimum", tool("    limits:", "      pids: 2"), 3, 5, "tools.t.limits", "pids: 2 is below the minimum of 4"},
		{"fds too many", tool("    limits:", "      fds: 2000000"), 3, 5, "tools.t.limits", "fds: 2000000 is outside 16..1048576"},
		{"time zero", tool("    limits:", "      time: 0"), 4, 13, "tools.t.limits.time", `invalid duration "0": must be positive`},
		{"time unit", tool("    limits:", "      time: 5d"), 4, 13, "tools.t.limits.time", `invalid duration "5d": unknown unit "d"`},
		{"cpu_time negative", tool("    limits:", "      cpu_time: -1s"), 4, 17, "tools.t.limits.cpu_time", `invalid duration "-1s"`},
		{"cpu bad", tool("    limits:", "      cpu: lots"), 4, 12, "tools.t.limits.cpu", `invalid CPU "lots"`},
		{"cpu zero float", tool("    limits:", "      cpu: 0.0"), 4, 12, "tools.t.limits.cpu", "must be more than zero"},
		{"output zero", tool("    limits:", "      output: 0"), 3, 5, "tools.t.limits", "output: 0 bytes must be positive"},

		// egress.
		{"egress mapping", tool("    egress: {host: a}"), 3, 13, "tools.t.egress", "expected a list, got a mapping"},
		{"egress scalar", tool("    egress: a.example"), 3, 13, "tools.t.egress", `expected a list, got "a.example"`},
		{"egress null item", tool("    egress:", "      - a.example", "      -"), 5, 8, "tools.t.egress[1]", "expected a string, got nothing"},
		{"egress list item", tool("    egress:", "      - [a]"), 4, 9, "tools.t.egress[0]", "expected a string, got a list"},
		{"egress bad host", tool("    egress:", "      - a.example", "      - a b"), 5, 9, "tools.t.egress[1]", `egress destination "a b": contains white space`},
		{"egress unknown key", tool("    egress:", "      - host: a", "        port: 443"), 5, 9, "tools.t.egress[0].port", `unknown field "port" (allowed: addresses, host, ports, private)`},
		{"egress no host", tool("    egress:", "      - ports: [443]"), 4, 9, "tools.t.egress[0]", `missing required field "host"`},
		{"egress host list", tool("    egress:", "      - host: [a]"), 4, 15, "tools.t.egress[0].host", "expected a string, got a list"},
		{"egress host compile", tool("    egress:", "      - host: a b", "        ports: [1]"), 4, 15, "tools.t.egress[0].host", `egress destination "a b": contains white space`},
		{"egress port text", tool("    egress:", "      - host: a", "        ports: [443, https]"), 5, 22, "tools.t.egress[0].ports[1]", `invalid number "https"`},
		{"egress port range", tool("    egress:", "      - host: a", "        ports: [65536]"), 5, 17, "tools.t.egress[0].ports[0]", `"65536" is out of range (1..65535)`},
		{"egress port zero", tool("    egress:", "      - host: a", "        ports: [0]"), 5, 17, "tools.t.egress[0].ports[0]", "out of range"},
		{"egress ports empty", tool("    egress:", "      - host: a", "        ports: []"), 5, 16, "tools.t.egress[0].ports", "must not be empty"},
		{"egress ports null", tool("    egress:", "      - host: a", "        ports:"), 5, 15, "tools.t.egress[0].ports", "must not be empty"},
		{"egress ports scalar", tool("    egress:", "      - host: a", "        ports: 443"), 5, 16, "tools.t.egress[0].ports", `expected a list, got "443"`},
		{"egress address list", tool("    egress:", "      - host: a", "        addresses: [[1]]"), 5, 21, "tools.t.egress[0].addresses[0]", "expected a string, got a list"},
		{"egress address compile", tool("    egress:", "      - host: a", "        addresses: [10.0.0.1, nope]", "        private: true"), 5, 31, "tools.t.egress[0].addresses[1]", `"nope" is not an IP address`},
		{"egress private needed", tool("    egress:", "      - host: a", "        addresses:", "          - 10.0.0.1"), 6, 13, "tools.t.egress[0].addresses[0]", "private"},
		{"egress port twice", tool("    egress:", "      - host: a:443", "        ports: [80]"), 5, 17, "tools.t.egress[0].ports[0]", "not both"},
		{"egress metadata", tool("    egress:", "      - host: metadata.google.internal", "        ports: [80]"), 4, 15, "tools.t.egress[0].host", "cloud metadata"},
		{"egress wildcard pinned", tool("    egress:", "      - host: '*.example.com'", "        addresses: [140.82.112.3]"), 5, 21, "tools.t.egress[0].addresses[0]", "wildcard"},
		{"egress ip pinned", tool("    egress:", "      - host: 140.82.112.3", "        addresses: [140.82.112.4]"), 5, 21, "tools.t.egress[0].addresses[0]", "only apply to host names"},
		{"egress reserved range", tool("    egress:", "      - 203.0.113.0/24:443"), 4, 9, "tools.t.egress[0]", "set private: true"},
		{"egress link-local private", tool("    egress:", "      - host: 169.254.0.0/16", "        private: true"), 4, 15, "tools.t.egress[0].host", "egress destination"},
		{"egress private range pinned", tool("    egress:", "      - host: 10.0.0.0/8", "        private: true", "        addresses: [140.82.112.4]"), 6, 21, "tools.t.egress[0].addresses[0]", "only apply to host names"},
		{"egress private yes", tool("    egress:", "      - host: a", "        private: yes"), 5, 18, "tools.t.egress[0].private", `expected true or false, got "yes"`},
		{"egress private True", tool("    egress:", "      - host: a", "        private: True"), 5, 18, "tools.t.egress[0].private", `expected true or false, got "True"`},
		{"egress private on", tool("    egress:", "      - host: a", "        private: on"), 5, 18, "tools.t.egress[0].private", "expected true or false"},
		{"egress private null", tool("    egress:", "      - host: a", "        private:"), 5, 17, "tools.t.egress[0].private", "expected true or false, got nothing"},
		{"egress duplicate host", tool("    egress:", "      - host: a", "        host: b"), 5, 9, "tools.t.egress[0].host", "duplicate key"},

		// network.
		{"network unknown", tool("    network:", "      conns: 1"), 4, 7, "tools.t.network.conns", `unknown field "conns" (allowed: bytes, connections, dns_rate)`},
		{"network list", tool("    network: [1]"), 3, 14, "tools.t.network", "expected a mapping of network settings, got a list"},
		{"connections zero", tool("    network:", "      connections: 0"), 4, 20, "tools.t.network.connections", `"0" is out of range (1..65536)`},
		{"connections big", tool("    network:", "      connections: 65537"), 4, 20, "tools.t.network.connections", "out of range (1..65536)"},
		{"dns_rate big", tool("    network:", "      dns_rate: 10001"), 4, 17, "tools.t.network.dns_rate", "out of range (1..10000)"},
		{"dns_rate float", tool("    network:", "      dns_rate: 1.5"), 4, 17, "tools.t.network.dns_rate", `invalid number "1.5"`},
		{"bytes zero", tool("    network:", "      bytes: 0"), 4, 14, "tools.t.network.bytes", `"0" must be more than zero`},
		{"bytes unit", tool("    network:", "      bytes: 1XB"), 4, 14, "tools.t.network.bytes", `invalid size "1XB"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("a.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse = %s, nil; want an error", dump(c))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse error %v (%T) is not an *Error", err, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse error %v does not match ErrInvalid", err)
			}
			if e.File != "a.yaml" || e.Line != tt.line || e.Column != tt.col || e.Field != tt.field {
				t.Errorf("Parse error at %s:%d:%d field %q; want a.yaml:%d:%d field %q (%v)",
					e.File, e.Line, e.Column, e.Field, tt.line, tt.col, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Parse error = %q; want it to contain %q", err, tt.msg)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse("a.yaml", make([]byte, MaxFileSize+1))
	want := "a.yaml: the file is larger than 1 MiB"
	if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(1 MiB + 1) error = %v; want %q", err, want)
	}
}

// TestParseErrorText pins the full text of a typical error, as users see
// it.
func TestParseErrorText(t *testing.T) {
	in := "tools:\n  fetch:\n    limits:\n      memory: 12QB\n"
	_, err := Parse("airlock.yaml", []byte(in))
	want := `airlock.yaml:4:15: tools.fetch.limits.memory: invalid size "12QB": unknown unit "QB" (use B, KiB, MiB, GiB, TiB)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v; want %q", err, want)
	}
}
