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
	// svc wraps settings lines in "services:\n  s:\n", so they start on
	// line 3.
	svc := func(ls ...string) string {
		return lines(append([]string{"services:", "  s:"}, ls...)...)
	}
	// up is a service with this upstream, on line 3 at column 15, and
	// these further settings from line 6 on.
	up := func(u string, ls ...string) string {
		return svc(append([]string{"    upstream: " + u, "    credential: {secret: k}", "    operations: [GET /]"}, ls...)...)
	}
	// cred is a service with this credential, from line 4 on.
	cred := func(ls ...string) string {
		return svc(append([]string{"    upstream: https://a.example", "    operations: [GET /]"}, ls...)...)
	}
	// ops is a service with these operations, from line 6 on.
	ops := func(ls ...string) string {
		return svc(append([]string{"    upstream: https://a.example", "    credential: {secret: k}", "    operations:"}, ls...)...)
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
		{"unknown top key", "tool:\n  t: {}\n", 1, 1, "tool", `unknown field "tool" (allowed: audit, builds, cluster, images, mcp, mcp_servers, secrets, server, services, tools, tracing)`},
		{"builds without tool", "tools:\n  t: {}\nbuilds:\n  concurrency: 2\n", 4, 3, "builds", "builds needs tool"},
		{"builds undefined tool", "tools:\n  t: {}\nbuilds:\n  tool: nope\n", 4, 9, "builds.tool", `undefined tool "nope"`},
		{"builds concurrency", "tools:\n  t: {}\nbuilds:\n  tool: t\n  concurrency: 0\n", 5, 16, "builds.concurrency", ""},
		{"builds upload_max", "tools:\n  t: {}\nbuilds:\n  tool: t\n  upload_max: 10B\n", 5, 15, "builds.upload_max", "at least 1KiB"},
		{"builds limits", "tools:\n  t: {}\nbuilds:\n  tool: t\n  limits: {memory: lots}\n", 5, 20, "builds.limits.memory", ""},
		{"builds allow", "tools:\n  t: {}\nbuilds:\n  tool: t\n  allow: [\"http://x\"]\n", 5, 11, "builds.allow[0]", ""},
		{"tools list", "tools:\n  - a\n", 2, 3, "tools", "expected a mapping of tool names to their settings, got a list"},
		{"tools scalar", "tools: x\n", 1, 8, "tools", `got "x"`},
		{"tool list", "tools:\n  t: [a]\n", 2, 6, "tools.t", "expected a mapping of tool settings, got a list"},
		{"two documents", "tools: {}\n---\ntools: {}\n", 2, 1, "", "more than one YAML document"},
		{"syntax error", "tools:\n  t: {\n", 2, 0, "", "invalid YAML: "},
		{"bad indent", "tools:\n  a: 1\n b: 2\n", 2, 0, "", "invalid YAML: "},
		{"tab indent", "tools:\n\tt: {}\n", 2, 1, "", "invalid YAML: a tab in the indentation; YAML indents with spaces only"},
		{"tab after spaces", "tools:\n  t:\n  \t  description: x\n", 3, 3, "", "a tab in the indentation; YAML indents with spaces only"},
		{"complex key", "tools:\n  ? [a]\n  : {}\n", 2, 5, "tools", "a key must be a plain name, got a list"},
		{"duplicate tool", "tools:\n  t: {}\n  u: {}\n  t: {}\n", 4, 3, "tools.t", `duplicate key "t" (first on line 2)`},
		{"duplicate top", "tools: {}\ntools: {}\n", 2, 1, "tools", "duplicate key \"tools\" (first on line 1)"},

		// YAML features that are refused.
		{"alias", tool("    env: &e {A: b}", "  u:", "    env: *e"), 3, 10, "tools.t.env", "YAML anchors (&e) are not supported"},
		{"alias only", "tools:\n  t:\n    description: *x\n", 0, 0, "", "invalid YAML: unknown anchor 'x' referenced"},
		{"unquoted wildcard", "tools:\n  t:\n    egress:\n      - *.example.com\n", 4, 0, "", `must be quoted: "*.example.com"`},
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
		{"unknown tool key", tool("    memory: 1GiB"), 3, 5, "tools.t.memory", `unknown field "memory" (allowed: command, description, e2b_templates, egress, env, image, inputs, isolation, limits, mounts, network, pool, rootfs, services, stdin, user, volumes, workdir)`},
		{"e2b template invalid", tool("    e2b_templates: [ok, -x]"), 3, 25, "tools.t.e2b_templates[1]", `invalid template name "-x"`},
		{"e2b template twice", tool("    e2b_templates: [a, a]"), 3, 24, "tools.t.e2b_templates[1]", `template name "a" is listed twice`},
		{"e2b template is a tool", lines("tools:", "  t: {e2b_templates: [u]}", "  u: {}"), 2, 0, "tools.t.e2b_templates", `"u" is the name of tool "u" (line 3)`},
		{"e2b template of two tools", lines("tools:", "  t: {e2b_templates: [base]}", "  u: {e2b_templates: [base]}"), 3, 0, "tools.u.e2b_templates", `"base" is also a template name of tool "t"`},
		{"kernel unknown", tool("    pool: {warm: 1, kernels: [python, r]}"), 3, 39, "tools.t.pool.kernels[1]", `unknown kernel language "r": want one of python, bash`},
		{"kernel twice", tool("    pool: {warm: 1, kernels: [bash, bash]}"), 3, 37, "tools.t.pool.kernels[1]", `kernel language "bash" is listed twice`},
		{"kernels without warm", tool("    pool: {kernels: [python]}"), 2, 0, "tools.t.pool.kernels", "set pool.warm (or pool.max) to 1 or more"},
		{"pool warm and max", tool("    pool: {warm: 2, max: 4}"), 3, 18, "tools.t.pool.warm", "either fixed (warm) or sizes itself (min and max), not both"},
		{"pool min without max", tool("    pool: {min: 2}"), 3, 11, "tools.t.pool", "an adaptive pool needs max, 1 or more"},
		{"pool min over max", tool("    pool: {min: 5, max: 4}"), 3, 17, "tools.t.pool.min", "min 5 is more than max 4"},
		{"pool max too big", tool("    pool: {max: 300}"), 3, 17, "tools.t.pool.max", "300"},
		{"pool idle without max", tool("    pool: {warm: 1, idle: 5m}"), 3, 11, "tools.t.pool.idle", "set min and max too"},
		{"pool idle too short", tool("    pool: {max: 4, idle: 10ms}"), 3, 26, "tools.t.pool.idle", "idle must be between 1s and 24h0m0s"},
		{"pool unknown key", tool("    pool: {size: 4}"), 3, 12, "tools.t.pool.size", `unknown field "size" (allowed: idle, kernels, max, min, warm)`},
		{"description list", tool("    description: [a]"), 3, 18, "tools.t.description", "expected a string, got a list"},
		{"description null", tool("    description:"), 3, 17, "tools.t.description", `expected a string, got nothing (write "" for an empty string)`},
		{"description nul", tool(`    description: "a\0b"`), 3, 18, "tools.t.description", "contains a NUL byte"},
		{"image bad name", tool("    image: Ubuntu"), 3, 12, "tools.t.image", `image name "Ubuntu"`},
		{"user not a number", tool("    user: root"), 3, 11, "tools.t.user", `"root": want UID or UID:GID`},
		{"user out of range", tool("    user: 70000"), 3, 11, "tools.t.user", `numbers from 0 to 65535`},
		{"user bad gid", tool("    user: \"1:x\""), 3, 11, "tools.t.user", `want UID or UID:GID`},
		{"rootfs unknown", tool("    image: py\n    rootfs: rw"), 4, 13, "tools.t.rootfs", `"rw": want "read-only" or "writable"`},
		{"rootfs writable on host", tool("    rootfs: writable"), 3, 13, "tools.t.rootfs", `a writable root needs an imported image`},
		{"isolation unknown", tool("    isolation: vm"), 3, 16, "tools.t.isolation", `"vm": want "namespaces" or "gvisor"`},
		{"isolation gvisor as root", tool("    user: 0:0\n    isolation: gvisor"), 4, 16, "tools.t.isolation", `commands as root (user 0) are not available with isolation gvisor`},
		{"isolation gvisor, little memory", tool("    limits: {memory: 32MiB}\n    isolation: gvisor"), 4, 16, "tools.t.isolation", `isolation gvisor needs 64 MiB at least`},
		{"isolation gvisor, few pids", tool("    limits: {pids: 16}\n    isolation: gvisor"), 4, 16, "tools.t.isolation", `isolation gvisor needs 64 at least`},
		{"images store relative", "images:\n  store: images\n", 2, 10, "images.store", `"images" is not an absolute path`},
		{"images max_size zero", "images:\n  max_size: \"0\"\n", 2, 13, "images.max_size", `must be more than zero`},
		{"images max_entries zero", "images:\n  max_entries: 0\n", 2, 16, "images.max_entries", ``},
		{"images max_pull zero", "images:\n  max_pull: 0\n", 2, 13, "images.max_pull", `must be more than zero`},
		{"volume name", "tools:\n  t:\n    volumes: [{name: vol_x, path: /data}]\n", 3, 22, "tools.t.volumes[0].name", "1 to 64 letters"},
		{"volume path", "tools:\n  t:\n    volumes: [{name: v, path: /etc/x}]\n", 3, 31, "tools.t.volumes[0].path", "/etc is built by airlock"},
		{"volume twice", "tools:\n  t:\n    volumes: [{name: v, path: /data}, {name: w, path: /data}]\n", 3, 39, "tools.t.volumes[1]", "a second volume at"},
		{"volume size", "tools:\n  t:\n    volumes: [{name: v, path: /data, size: lots}]\n", 3, 44, "tools.t.volumes[0].size", "lots"},
		{"images unknown key", "images:\n  dir: /x\n", 2, 3, "images.dir", `unknown field "dir" (allowed: max_entries, max_pull, max_size, registries, snapshot_max_age, snapshots, store, volumes)`},
		{"image bad digest", tool("    image: sha256:abc"), 3, 12, "tools.t.image", `digest "sha256:abc"`},
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
		{"pids below sandbox minimum", tool("    limits:", "      pids: 2"), 3, 5, "tools.t.limits", "pids: 2 is below the minimum of 8"},
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
		{"egress unknown key", tool("    egress:", "      - host: a", "        port: 443"), 5, 9, "tools.t.egress[0].port", `unknown field "port" (allowed: addresses, host, opaque, ports, private)`},
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
		{"network unknown", tool("    network:", "      conns: 1"), 4, 7, "tools.t.network.conns", `unknown field "conns" (allowed: bytes, connections, dns_rate, host_lookups, wildcard_names)`},
		{"network list", tool("    network: [1]"), 3, 14, "tools.t.network", "expected a mapping of network settings, got a list"},
		{"connections zero", tool("    network:", "      connections: 0"), 4, 20, "tools.t.network.connections", `"0" is out of range (1..65536)`},
		{"connections big", tool("    network:", "      connections: 65537"), 4, 20, "tools.t.network.connections", "out of range (1..65536)"},
		{"dns_rate big", tool("    network:", "      dns_rate: 10001"), 4, 17, "tools.t.network.dns_rate", "out of range (1..10000)"},
		{"dns_rate float", tool("    network:", "      dns_rate: 1.5"), 4, 17, "tools.t.network.dns_rate", `invalid number "1.5"`},
		{"bytes zero", tool("    network:", "      bytes: 0"), 4, 14, "tools.t.network.bytes", `"0" must be more than zero`},
		{"bytes unit", tool("    network:", "      bytes: 1XB"), 4, 14, "tools.t.network.bytes", `invalid size "1XB"`},

		// secrets.
		{"secrets list", "secrets: [a]\n", 1, 10, "secrets", "expected a mapping of secret names to their sources, got a list"},
		{"secret bad name", "secrets:\n  -x: {env: X}\n", 2, 3, "secrets.-x", `invalid secret name "-x": use 1-64 letters`},
		{"secret long name", "secrets:\n  " + strings.Repeat("a", 65) + ": {env: X}\n", 2, 3, "secrets." + strings.Repeat("a", 65), "invalid secret name"},
		{"secret null", "secrets:\n  k:\n", 2, 3, "secrets.k", `missing its source: give "env" (an environment variable name) or "file" (an absolute path)`},
		{"secret empty", "secrets:\n  k: {}\n", 2, 3, "secrets.k", "missing its source"},
		{"secret scalar", "secrets:\n  k: GITHUB_TOKEN\n", 2, 6, "secrets.k", `expected a mapping with env or file, got "GITHUB_TOKEN"`},
		{"secret both", "secrets:\n  k:\n    env: X\n    file: /x\n", 4, 5, "secrets.k.file", `give "env" or "file", not both`},
		{"secret unknown", "secrets:\n  k:\n    value: x\n", 3, 5, "secrets.k.value", `unknown field "value" (allowed: env, file)`},
		{"secret duplicate", "secrets:\n  k: {env: X}\n  k: {env: Y}\n", 3, 3, "secrets.k", `duplicate key "k" (first on line 2)`},
		{"secret env name", "secrets:\n  k:\n    env: 1X\n", 3, 10, "secrets.k.env", `invalid environment variable name "1X"`},
		{"secret env dollar", "secrets:\n  k:\n    env: $X\n", 3, 10, "secrets.k.env", `invalid environment variable name "$X"`},
		{"secret env null", "secrets:\n  k:\n    env:\n", 3, 9, "secrets.k.env", "expected a string, got nothing"},
		{"secret file relative", "secrets:\n  k:\n    file: s/x\n", 3, 11, "secrets.k.file", `"s/x" is not an absolute path`},
		{"secret file unclean", "secrets:\n  k:\n    file: /a/../b\n", 3, 11, "secrets.k.file", "is not a clean path"},
		{"secret file list", "secrets:\n  k:\n    file: [/a]\n", 3, 11, "secrets.k.file", "expected a string, got a list"},

		// services: shape.
		{"services scalar", "services: x\n", 1, 11, "services", `expected a mapping of service names to their settings, got "x"`},
		{"service upper case", "services:\n  GitHub: {}\n", 2, 3, "services.GitHub", `invalid service name "GitHub": use 1-63 lower-case letters`},
		{"service dot", "services:\n  a.b: {}\n", 2, 3, `services["a.b"]`, `invalid service name "a.b"`},
		{"service dash", "services:\n  -a: {}\n", 2, 3, "services.-a", "invalid service name"},
		{"service long", "services:\n  " + strings.Repeat("a", 64) + ": {}\n", 2, 3, "services." + strings.Repeat("a", 64), "invalid service name"},
		{"service list", "services:\n  s: [a]\n", 2, 6, "services.s", "expected a mapping of service settings, got a list"},
		{"service null", "services:\n  s:\n", 2, 3, "services.s", `missing required field "upstream"`},
		{"service no credential", svc("    upstream: https://a.example", "    operations: [GET /]"), 2, 3, "services.s", `missing required field "credential"`},
		{"service no operations", svc("    upstream: https://a.example", "    credential: {secret: k}"), 2, 3, "services.s", `missing required field "operations"`},
		{"transparent http", up("http://a.example", "    transparent: true"), 6, 18, "services.s.transparent", "needs an https upstream named by a host name"},
		{"transparent address", up("https://8.8.8.8", "    transparent: true"), 6, 18, "services.s.transparent", "needs an https upstream named by a host name"},
		{"transparent not bool", up("https://a.example", "    transparent: yes please"), 6, 18, "services.s.transparent", ""},
		{"service unknown", svc("    upstrem: x"), 3, 5, "services.s.upstrem", `unknown field "upstrem" (allowed: addresses, ca, credential, env, max_request, max_response, operations, private, rate, transparent, upstream)`},
		{"service dash key", svc("    max-request: 1"), 3, 5, "services.s.max-request", `did you mean "max_request"?`},
		{"service duplicate", "services:\n  s: {}\n  s: {}\n", 3, 3, "services.s", `duplicate key "s" (first on line 2)`},

		// services: upstream.
		{"upstream list", up("[x]"), 3, 15, "services.s.upstream", "expected a string, got a list"},
		{"upstream ftp", up("ftp://a.example"), 3, 15, "services.s.upstream", `invalid upstream URL "ftp://a.example": the scheme must be http or https`},
		{"upstream no scheme", up("a.example"), 3, 15, "services.s.upstream", "the scheme must be http or https"},
		{"upstream no host", up("https://"), 3, 15, "services.s.upstream", "a host is required"},
		{"upstream opaque", up("https:a.example"), 3, 15, "services.s.upstream", "a host is required"},
		{"upstream user", up("https://u:p@a.example"), 3, 15, "services.s.upstream", "user info (user:password@) is not allowed; put credentials in secrets"},
		{"upstream query", up("https://a.example/?x=1"), 3, 15, "services.s.upstream", "a query or fragment is not allowed"},
		{"upstream empty query", up("https://a.example?"), 3, 15, "services.s.upstream", "a query or fragment is not allowed"},
		{"upstream fragment", up("'https://a.example/#'"), 3, 15, "services.s.upstream", "a query or fragment is not allowed"},
		{"upstream escape", up("https://a.example/a%2Fb"), 3, 15, "services.s.upstream", "percent-escapes are not allowed"},
		{"upstream host escape", up("https://%61.example"), 3, 15, "services.s.upstream", "percent-escapes are not allowed"},
		{"upstream bad port", up("https://a.example:x"), 3, 15, "services.s.upstream", `invalid upstream URL "https://a.example:x": invalid port ":x" after host`},
		{"upstream empty port", up("'https://a.example:'"), 3, 15, "services.s.upstream", "':' without a port"},
		{"upstream port zero", up("https://a.example:0443"), 3, 15, "services.s.upstream", `egress destination "a.example:0443": port "0443" is not valid`},
		{"upstream port range", up("https://a.example:65536"), 3, 15, "services.s.upstream", `port "65536" is not valid`},
		{"upstream trailing dot", up("https://a.example./"), 3, 15, "services.s.upstream", "without a trailing dot"},
		{"upstream double slash", up("https://a.example/a//b"), 3, 15, "services.s.upstream", "the path must be clean"},
		{"upstream dot dot", up("https://a.example/a/../b"), 3, 15, "services.s.upstream", "the path must be clean"},
		{"upstream two slashes", up("https://a.example//"), 3, 15, "services.s.upstream", "the path must be clean"},
		{"upstream space", up(`"https://a.example/a b"`), 3, 15, "services.s.upstream", "the path may only use"},
		{"upstream unicode", up("https://a.example/é"), 3, 15, "services.s.upstream", "the path may only use"},
		{"upstream wildcard", up("'https://*.example.com'"), 3, 15, "services.s.upstream", "not a wildcard"},
		{"upstream metadata", up("http://metadata.google.internal"), 3, 15, "services.s.upstream", "cloud metadata"},
		{"upstream link-local", up("http://169.254.169.254"), 3, 15, "services.s.upstream", "egress destination"},
		{"upstream loopback", up("http://127.0.0.1:8080"), 3, 15, "services.s.upstream", "set private: true to allow it"},
		{"upstream ip pinned", up("https://140.82.112.3", "    addresses: [140.82.112.4]"), 6, 17, "services.s.addresses[0]", "only apply to host names"},
		{"upstream pinned private", up("https://a.example", "    addresses: [10.0.0.1]"), 6, 17, "services.s.addresses[0]", "set private: true"},
		{"upstream pinned bad", up("https://a.example", "    addresses: [140.82.112.4, x]", "    private: true"), 6, 31, "services.s.addresses[1]", `"x" is not an IP address`},
		{"upstream addresses empty", up("https://a.example", "    addresses: []"), 6, 16, "services.s.addresses", "must not be empty"},
		{"upstream private yes", up("https://a.example", "    private: yes"), 6, 14, "services.s.private", `expected true or false, got "yes"`},
		{"ca relative", up("https://a.example", "    ca: ca.pem"), 6, 9, "services.s.ca", `"ca.pem" is not an absolute path`},
		{"ca trailing slash", up("https://a.example", "    ca: /etc/ca/"), 6, 9, "services.s.ca", "is not a clean path"},

		// services: credential.
		{"credential list", cred("    credential: [k]"), 5, 17, "services.s.credential", "expected a mapping with secret, header and template, got a list"},
		{"credential null", cred("    credential:"), 5, 5, "services.s.credential", `missing required field "secret"`},
		{"credential no secret", cred("    credential: {header: X-Key}"), 5, 5, "services.s.credential", `missing required field "secret"`},
		{"credential unknown", cred("    credential: {secret: k, heder: X}"), 5, 29, "services.s.credential.heder", `unknown field "heder" (allowed: header, secret, template)`},
		{"credential secret null", cred("    credential: {secret: }"), 5, 26, "services.s.credential.secret", "expected a string"},
		{"header space", cred(`    credential: {secret: k, header: "X Key"}`), 5, 37, "services.s.credential.header", `invalid header name "X Key"`},
		{"header colon", cred(`    credential: {secret: k, header: "X:"}`), 5, 37, "services.s.credential.header", `invalid header name "X:"`},
		{"header empty", cred(`    credential: {secret: k, header: ""}`), 5, 37, "services.s.credential.header", `invalid header name ""`},
		{"header unicode", cred(`    credential: {secret: k, header: "X-Clé"}`), 5, 37, "services.s.credential.header", "invalid header name"},
		{"header proxy", cred("    credential: {secret: k, header: Proxy-Authorization}"), 5, 37, "services.s.credential.header", `"Proxy-Authorization" cannot carry a credential`},
		{"header connection", cred("    credential: {secret: k, header: connection}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header host", cred("    credential: {secret: k, header: HOST}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header length", cred("    credential: {secret: k, header: Content-Length}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header te", cred("    credential: {secret: k, header: TE}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header transfer", cred("    credential: {secret: k, header: Transfer-Encoding}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header upgrade", cred("    credential: {secret: k, header: Upgrade}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header keep-alive", cred("    credential: {secret: k, header: Keep-Alive}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"header trailer", cred("    credential: {secret: k, header: Trailer}"), 5, 37, "services.s.credential.header", "cannot carry a credential"},
		{"template none", cred("    credential: {secret: k, template: Bearer}"), 5, 39, "services.s.credential.template", `"Bearer" must contain "{secret}" exactly once`},
		{"template case", cred(`    credential: {secret: k, template: "Bearer {Secret}"}`), 5, 39, "services.s.credential.template", "exactly once"},
		{"template twice", cred(`    credential: {secret: k, template: "{secret}{secret}"}`), 5, 39, "services.s.credential.template", "exactly once"},
		{"template crlf", cred(`    credential: {secret: k, template: "{secret}\r\nX-Evil: 1"}`), 5, 39, "services.s.credential.template", "contains a line break or other control character"},
		{"template lf", cred(`    credential: {secret: k, template: "a\n{secret}"}`), 5, 39, "services.s.credential.template", "line break"},
		{"template nul", cred(`    credential: {secret: k, template: "{secret}\0"}`), 5, 39, "services.s.credential.template", "contains a NUL byte"},

		// services: env and defaults.
		{"service env list", up("https://a.example", "    env: [A=b]"), 6, 10, "services.s.env", "expected a mapping of NAME: value, got a list"},
		{"service env name", up("https://a.example", "    env: {A-B: x}"), 6, 11, "services.s.env.A-B", `invalid environment variable name "A-B"`},
		{"service env null", up("https://a.example", "    env: {A: }"), 6, 14, "services.s.env.A", "expected a string"},
		{"service env secret", up("https://a.example", `    env: {TOKEN: "{secret}"}`), 6, 18, "services.s.env.TOKEN", `"{secret}" is not replaced here`},
		{"service rate zero", up("https://a.example", "    rate: 0"), 6, 11, "services.s.rate", `"0" is out of range (1..100000)`},
		{"service rate big", up("https://a.example", "    rate: 100001"), 6, 11, "services.s.rate", "out of range (1..100000)"},
		{"service rate fraction", up("https://a.example", "    rate: 0.5"), 6, 11, "services.s.rate", `invalid number "0.5"`},
		{"service max_request zero", up("https://a.example", "    max_request: 0"), 6, 18, "services.s.max_request", `"0" must be more than zero`},
		{"service max_request unit", up("https://a.example", "    max_request: 1QB"), 6, 18, "services.s.max_request", `invalid size "1QB"`},
		{"service max_response zero", up("https://a.example", "    max_response: 0KiB"), 6, 19, "services.s.max_response", "must be more than zero"},

		// services: operations.
		{"operations empty", ops("      []"), 6, 7, "services.s.operations", "must list at least one operation, such as GET /user"},
		{"operations null", svc("    upstream: https://a.example", "    credential: {secret: k}", "    operations:"), 5, 16, "services.s.operations", "must list at least one operation"},
		{"operations scalar", svc("    operations: GET /"), 3, 17, "services.s.operations", `expected a list, got "GET /"`},
		{"operation lower method", ops("      - get /a"), 6, 9, "services.s.operations[0]", `invalid operation template "get /a": method must be one of GET, POST`},
		{"operation connect", ops("      - CONNECT /a"), 6, 9, "services.s.operations[0]", "method must be one of"},
		{"operation no path", ops("      - GET"), 6, 9, "services.s.operations[0]", `invalid operation template "GET": want METHOD /path`},
		{"operation two spaces", ops("      - GET  /a"), 6, 9, "services.s.operations[0]", "path must start with /"},
		{"operation trailing slash", ops("      - GET /a", "      - GET /a/"), 7, 9, "services.s.operations[1]", "trailing slash"},
		{"operation dot segment", ops("      - GET /a/../b"), 6, 9, "services.s.operations[0]", "invalid operation template"},
		{"operation half param", ops("      - GET /a{b}"), 6, 9, "services.s.operations[0]", "braces must enclose a whole segment"},
		{"operation list", ops("      - [GET /]"), 6, 9, "services.s.operations[0]", "expected a string, got a list"},
		{"operation null", ops("      -"), 6, 8, "services.s.operations[0]", "expected a string, got nothing"},
		{"operation duplicate", ops("      - GET /a", "      - POST /a", "      - GET /a"), 8, 9, "services.s.operations[2]", `duplicate operation "GET /a" (first at index 0)`},
		{"operation duplicate forms", ops("      - GET /a", "      - {method: GET, path: /a, rate: 1}"), 7, 9, "services.s.operations[1]", `duplicate operation "GET /a"`},
		{"operation no method", ops("      - path: /a"), 6, 9, "services.s.operations[0]", `missing required field "method"`},
		{"operation no path field", ops("      - method: GET"), 6, 9, "services.s.operations[0]", `missing required field "path"`},
		{"operation unknown", ops("      - method: GET", "        path: /a", "        querys: [a]"), 8, 9, "services.s.operations[0].querys", `unknown field "querys" (allowed: content_types, headers, max_request, max_response, method, params, path, query, rate)`},
		{"operation bad method", ops("      - method: get", "        path: /a"), 6, 17, "services.s.operations[0].method", "method must be one of"},
		{"operation bad path", ops("      - method: GET", "        path: a"), 7, 15, "services.s.operations[0].path", "path must start with /"},
		{"operation param pattern", ops("      - method: GET", "        path: /{a}", `        params: {a: "("}`), 8, 21, "services.s.operations[0].params.a", `parameter "a": bad pattern`},
		{"operation param unknown", ops("      - method: GET", "        path: /{a}", `        params: {a: "x", b: "y"}`), 8, 26, "services.s.operations[0].params.b", `pattern given for "b", which is not a parameter of the path`},
		{"operation params list", ops("      - method: GET", "        path: /{a}", "        params: [a]"), 8, 17, "services.s.operations[0].params", "expected a mapping of parameter names to regular expressions, got a list"},
		{"operation param null", ops("      - method: GET", "        path: /{a}", "        params: {a: }"), 8, 21, "services.s.operations[0].params.a", "expected a string"},
		{"operation query name", ops("      - method: GET", "        path: /a", `        query: [ok, "a=b"]`), 8, 21, "services.s.operations[0].query[1]", `invalid query parameter name "a=b"`},
		{"operation query space", ops("      - method: GET", "        path: /a", `        query: ["a b"]`), 8, 17, "services.s.operations[0].query[0]", "invalid query parameter name"},
		{"operation query empty name", ops("      - method: GET", "        path: /a", `        query: [""]`), 8, 17, "services.s.operations[0].query[0]", `invalid query parameter name ""`},
		{"operation query twice", ops("      - method: GET", "        path: /a", "        query: [a, b, a]"), 8, 23, "services.s.operations[0].query[2]", `"a" is listed twice (first at index 0)`},
		{"operation query scalar", ops("      - method: GET", "        path: /a", "        query: a"), 8, 16, "services.s.operations[0].query", `expected a list, got "a"`},
		{"operation types empty", ops("      - method: POST", "        path: /a", "        content_types: []"), 8, 24, "services.s.operations[0].content_types", "must not be empty"},
		{"operation types upper", ops("      - method: POST", "        path: /a", "        content_types: [Application/JSON]"), 8, 25, "services.s.operations[0].content_types[0]", `invalid media type "Application/JSON": want type/subtype in lower case`},
		{"operation types params", ops("      - method: POST", "        path: /a", `        content_types: ["application/json; charset=utf-8"]`), 8, 25, "services.s.operations[0].content_types[0]", "invalid media type"},
		{"operation types wildcard", ops("      - method: POST", "        path: /a", `        content_types: ["*/*"]`), 8, 25, "services.s.operations[0].content_types[0]", "invalid media type"},
		{"operation types no slash", ops("      - method: POST", "        path: /a", "        content_types: [json]"), 8, 25, "services.s.operations[0].content_types[0]", "invalid media type"},
		{"operation types twice", ops("      - method: POST", "        path: /a", "        content_types: [text/csv, text/csv]"), 8, 35, "services.s.operations[0].content_types[1]", "listed twice"},
		{"operation rate", ops("      - method: GET", "        path: /a", "        rate: 0"), 8, 15, "services.s.operations[0].rate", "out of range (1..100000)"},
		{"operation max_request", ops("      - method: GET", "        path: /a", "        max_request: 0"), 8, 22, "services.s.operations[0].max_request", "must be more than zero"},
		{"operation max_response", ops("      - method: GET", "        path: /a", "        max_response: lots"), 8, 23, "services.s.operations[0].max_response", `invalid size "lots"`},

		// References, checked once the whole file is read.
		{"undefined secret", cred("    credential: {secret: nope}"), 5, 26, "services.s.credential.secret", `undefined secret "nope" (no secrets are defined)`},
		{
			"undefined secret listed", lines("secrets:", "  b: {env: B}", "  a: {file: /a}", "services:", "  s:", "    upstream: https://a.example", "    credential:", "      secret: github", "    operations: [GET /]"),
			8, 15, "services.s.credential.secret", `undefined secret "github" (defined secrets: a, b)`,
		},
		{"undefined service", tool("    services: [nope]"), 3, 16, "tools.t.services[0]", `undefined service "nope" (no services are defined)`},
		{
			"undefined service listed", lines("tools:", "  t:", "    services: [zz, a, nope]", "services:", "  zz: {upstream: https://a.example, credential: {secret: k}, operations: [GET /]}", "  a: {upstream: https://a.example, credential: {secret: k}, operations: [GET /]}", "secrets: {k: {env: K}}"),
			3, 23, "tools.t.services[2]", `undefined service "nope" (defined services: a, zz)`,
		},
		{"tool services twice", tool("    services: [a, b, a]"), 3, 22, "tools.t.services[2]", `"a" is listed twice (first at index 0)`},
		{"tool services scalar", tool("    services: a"), 3, 15, "tools.t.services", `expected a list, got "a"`},
		{"tool services item list", tool("    services: [[a]]"), 3, 16, "tools.t.services[0]", "expected a string, got a list"},
		{
			"service env conflict", lines("tools:", "  t:", "    env: {Y: 1}", "    services: [a, b]", "services:",
				"  a: {upstream: https://a.example, credential: {secret: k}, operations: [GET /], env: {X: 1, Y: 1}}",
				"  b: {upstream: https://b.example, credential: {secret: k}, operations: [GET /], env: {Y: 2, X: 2}}",
				"secrets: {k: {env: K}}"),
			4, 19, "tools.t.services[1]", `services "a" and "b" both set environment variable X; set it in the tool's env to choose its value`,
		},
		{
			"service env url conflict", lines("tools:", "  t:", "    services: [a, b]", "services:",
				`  a: {upstream: https://a.example, credential: {secret: k}, operations: [GET /], env: {U: "{url}"}}`,
				`  b: {upstream: https://b.example, credential: {secret: k}, operations: [GET /], env: {U: "{url}"}}`,
				"secrets: {k: {env: K}}"),
			3, 19, "tools.t.services[1]", `services "a" and "b" both set environment variable U`,
		},
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
