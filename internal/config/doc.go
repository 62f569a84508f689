// Package config reads airlock.yaml, the file that names tools — sandbox
// profiles an agent asks for by name — and their settings: environment,
// resource ceilings, egress destinations and network caps.
//
// # Finding the file
//
// Find picks the file: the --config flag if given, else $AIRLOCK_CONFIG if
// set (both must exist), else /etc/airlock/airlock.yaml, else none, in
// which case the built-in default (Empty: no tools) applies. The current
// directory is never searched. Load reads at most MaxFileSize (1 MiB) and
// Parse parses.
//
// # Format
//
//	# airlock.yaml
//	tools:
//	  fetch:                          # tool name
//	    description: Fetch a URL      # optional free text
//	    image: host                   # optional; only "host" exists today
//	    workdir: /workspace           # optional absolute path, default /workspace
//	    env:                          # optional NAME: value, kept in file order
//	      LANG: C.UTF-8
//	    limits:                       # optional; each key optional
//	      memory: 256MiB              # sizes: "64MiB", "1GiB", plain bytes
//	      pids: 64                    # positive whole numbers
//	      disk: 64MiB
//	      fds: 256
//	      output: 1MiB
//	      time: 30s                   # durations: "30s", "5m", plain seconds; > 0
//	      cpu: 0.5                    # cores, or "500m"; 0 (or none) = unthrottled
//	      cpu_time: 10s               # 0 = none
//	    egress:                       # optional list of destinations; none = no network
//	      - api.github.com
//	      - "*.githubusercontent.com:443"
//	      - 140.82.112.0/20:443
//	      - host: mirror.internal     # required in the mapping form
//	        ports: [443, 8443]        # 1..65535, not empty
//	        addresses: [10.0.0.5]     # not empty
//	        private: true             # true or false
//	    network:                      # optional per-sandbox egress caps
//	      connections: 256            # concurrent outbound connections, 1..65536
//	      bytes: 1GiB                 # total bytes both ways, default 4GiB, > 0
//	      dns_rate: 100               # DNS queries per second, 1..10000
//
// The only top-level key is tools, which may be missing, empty or null. A
// file that is empty or holds only comments is a config without tools.
//
// Tool names are 1-64 letters, digits, '_' and '-', starting with a letter
// or digit. Environment names are [A-Za-z_][A-Za-z0-9_]*. workdir must be
// absolute and clean (no ".", ".." or empty elements, no trailing slash).
// Limit values use the syntax of the matching `airlock run` flags (see
// package units); once applied to sandbox.DefaultLimits they must pass
// sandbox.Limits.Validate. Egress strings and mappings are compiled by
// policy.Compile, which defines the host spec syntax.
//
// # Strictness
//
// The parser works on the YAML node tree so that every error can name a
// line, a column and a field path (*Error; all match ErrInvalid). It
// refuses rather than guesses:
//
//   - unknown keys, listing the allowed ones, and duplicate keys, naming
//     the earlier line;
//   - a value of the wrong shape: a list where a mapping belongs, a
//     mapping where a string belongs, null where a value is needed (null
//     is accepted only for mappings and lists, meaning empty);
//   - booleans other than true and false (no yes/no/on/off), and whole
//     numbers other than plain decimal (no sign, 1e3, 0x10, 010, 1_000);
//   - NUL bytes in any string;
//   - YAML anchors, aliases and merge keys (aliases are how the "billion
//     laughs" attack expands a small file into a huge tree), tags other
//     than !!str, !!int, !!bool, !!float, !!null, !!map and !!seq, and more
//     than one YAML document;
//   - more than MaxNodes nodes or nesting deeper than MaxDepth.
//
// Scalars are read by their text: env: {N: 5} sets N=5, and a string value
// may be written quoted or not.
package config
