// Package config reads airlock.yaml, the file that names tools — sandbox
// profiles an agent asks for by name — and their settings: environment,
// resource ceilings, egress destinations and network caps; and the
// services that the credential broker lets tools call without ever holding
// their credentials, with the secrets it attaches on the host.
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
//	    image: host                   # optional; "host" or an imported image (airlock image import)
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
//	    services: [github]            # optional; services defined below
//	services:
//	  github:                         # service name: [a-z0-9][a-z0-9_-]{0,62}
//	    upstream: https://api.github.com  # required; http or https
//	    private: false                # optional, as for egress
//	    addresses: [140.82.112.6]     # optional, as for egress
//	    ca: /etc/airlock/ca/gh.pem    # optional absolute path of PEM CA certificates
//	    credential:                   # required
//	      secret: github_token        # required; a secret defined below
//	      header: Authorization       # default Authorization
//	      template: "Bearer {secret}" # default "{secret}"
//	    env:                          # optional placeholders for the sandbox
//	      GITHUB_API_URL: "{url}"     # {url}: the service's broker URL
//	      GITHUB_TOKEN: airlock-brokered
//	    rate: 60                      # calls per minute per operation, 1..100000
//	    max_request: 1MiB             # request body cap, > 0
//	    max_response: 10MiB           # response body cap, > 0
//	    operations:                   # required, not empty
//	      - GET /repos/{owner}/{repo}/issues
//	      - method: POST              # required in the mapping form
//	        path: /repos/{owner}/{repo}/issues  # required
//	        params: {owner: "[a-z0-9-]+"}  # whole-segment patterns
//	        query: [state]            # allowed query parameters; default none
//	        content_types: [application/json]
//	        max_request: 64KiB        # rate and caps override the service's
//	        rate: 30
//	secrets:
//	  github_token:                   # secret name: as tool names
//	    env: GITHUB_TOKEN             # exactly one of env (a variable name)
//	  other:
//	    file: /etc/airlock/secrets/other  # or file (an absolute path)
//
// The top-level keys are tools, services and secrets, in any order; each
// may be missing, empty or null. A file that is empty or holds only
// comments is a config without tools. Names may be used before they are
// defined: references (a tool's services, a credential's secret) are
// checked once the whole file is read.
//
// Tool and secret names are 1-64 letters, digits, '_' and '-', starting
// with a letter or digit. Service names are a URL path segment of the
// broker and so are stricter: 1-63 lower-case letters, digits, '_' and
// '-', starting with a letter or digit. Environment names are
// [A-Za-z_][A-Za-z0-9_]*. workdir, a secret's file and a service's ca must
// be absolute and clean (no ".", ".." or empty elements, no trailing
// slash). Limit values use the syntax of the matching `airlock run` flags
// (see package units); once applied to sbspec.DefaultLimits they must
// pass sbspec.Limits.Validate. Egress strings and mappings, and a
// service's upstream host and port with its addresses and private, are
// compiled by policy.Compile, which defines the host spec syntax and
// refuses metadata and link-local destinations. Operations are parsed by
// route.ParseTemplate and route.ParseOperation, which define the method
// and path template syntax.
//
// # Services and secrets
//
// A sandbox never holds a service's credential. Code in it calls the
// broker at $AIRLOCK_BROKER_URL/<service>/<path>; the broker forwards a
// call only if it matches one of the service's operations (method, path
// template, query parameter names, request media type, body caps and
// rate), and attaches the credential on the host: the header named by
// credential.header, set to credential.template with {secret} replaced by
// the secret's value. Secret.Read fetches that value at each call, from
// the environment of the airlock process or from a file, and its errors
// never contain the value.
//
// The upstream URL has no user info, query or fragment, no
// percent-escapes, and a clean base path; one trailing slash is dropped.
// The header may not be a hop-by-hop or framing header (Connection,
// Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Host,
// Content-Length), which libraries and proxies drop or rewrite, and the
// template must hold {secret} exactly once and no control characters.
// An operation without content_types accepts any media type if its method
// is GET, HEAD, DELETE or OPTIONS, and only application/json otherwise.
//
// A service's env reaches the sandboxes of the tools that use it, so its
// values are placeholders, never credentials ({secret} is refused there).
// Where a tool's own env sets the same name, the tool's value wins; two
// services of one tool that set the same name to different values (or to
// values holding {url}) are an error unless the tool's env sets it.
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
