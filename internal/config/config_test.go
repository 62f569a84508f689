package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/sbspec"
)

// lines joins its arguments into a file, one line each.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// dest compiles a spec the test knows is valid.
func dest(t *testing.T, s policy.Spec) policy.Destination {
	t.Helper()
	d, err := policy.Compile(s)
	if err != nil {
		t.Fatalf("policy.Compile(%+v): %v", s, err)
	}
	return d
}

// cfg is the config of a file a.yaml with these tools, in this order,
// and no secrets or services.
func cfg(tools ...*Tool) *Config {
	c := Empty()
	c.Path = "a.yaml"
	for _, t := range tools {
		c.Tools[t.Name] = t
		c.Order = append(c.Order, t.Name)
	}
	return c
}

// defTool is a tool as it is with no settings at all.
func defTool(name string, line int) *Tool {
	return &Tool{Name: name, Image: ImageHost, Workdir: "/workspace", Network: DefaultNetwork(), Line: line}
}

func TestParseValid(t *testing.T) {
	full := lines(
		"# airlock.yaml",
		"tools:",
		"  fetch:",
		"    description: Fetch a URL",
		"    image: host",
		"    workdir: /srv/work",
		"    env:",
		"      LANG: C.UTF-8",
		"      N: 5",
		"      F: 1.50",
		`      EMPTY: ""`,
		"      _X1: yes",
		"    limits:",
		"      memory: 256MiB",
		"      pids: 64",
		"      disk: 64MiB",
		"      fds: 256",
		"      output: 1MiB",
		"      time: 30s",
		"      cpu: 0.5",
		"      cpu_time: 10s",
		"    egress:",
		"      - api.github.com",
		`      - "*.githubusercontent.com:443"`,
		"      - 140.82.112.0/20:443",
		"      - host: mirror.internal",
		"        ports: [443, 8443]",
		"        addresses: [10.0.0.5]",
		"        private: true",
		"      - {host: git.internal:22, addresses: [10.0.0.6], private: true, opaque: true}",
		"    network:",
		"      connections: 10",
		"      bytes: 1GiB",
		"      dns_rate: 5",
		"  b-2:",
		"    limits: {cpu: 0, cpu_time: 0, time: 90}",
		"  9lives: {}",
	)
	fetch := &Tool{
		Name:        "fetch",
		Description: "Fetch a URL",
		Image:       "host",
		Workdir:     "/srv/work",
		WorkdirSet:  true,
		Env:         []string{"LANG=C.UTF-8", "N=5", "F=1.50", "EMPTY=", "_X1=yes"},
		Limits: Limits{
			Memory:   new(int64(256 << 20)),
			Pids:     new(int64(64)),
			Disk:     new(int64(64 << 20)),
			FDs:      new(int64(256)),
			Output:   new(int64(1 << 20)),
			Time:     new(30 * time.Second),
			CPUMilli: new(int64(500)),
			CPUTime:  new(10 * time.Second),
		},
		Egress: []policy.Destination{
			dest(t, policy.Spec{Host: "api.github.com"}),
			dest(t, policy.Spec{Host: "*.githubusercontent.com:443"}),
			dest(t, policy.Spec{Host: "140.82.112.0/20:443"}),
			dest(t, policy.Spec{Host: "mirror.internal", Ports: []int{443, 8443}, Addresses: []string{"10.0.0.5"}, Private: true}),
			dest(t, policy.Spec{Host: "git.internal:22", Addresses: []string{"10.0.0.6"}, Private: true, Opaque: true}),
		},
		Network: Network{Connections: 10, Bytes: 1 << 30, DNSRate: 5, WildcardNames: 64},
		Line:    3,
	}
	b2 := defTool("b-2", 35)
	b2.Limits = Limits{CPUMilli: new(int64(0)), CPUTime: new(time.Duration(0)), Time: new(90 * time.Second)}

	tests := []struct {
		name string
		in   string
		want *Config
	}{
		{"empty", "", cfg()},
		{"comments only", "# nothing\n\n   # here\n", cfg()},
		{"null document", "~\n", cfg()},
		{"document marker", "---\n# x\n", cfg()},
		{"empty mapping", "{}\n", cfg()},
		{"tools null", "tools:\n", cfg()},
		{"tools empty", "tools: {}\n", cfg()},
		{"tool null", "tools:\n  t:\n", cfg(defTool("t", 2))},
		{
			"null containers",
			"tools:\n  t:\n    env:\n    limits:\n    egress:\n    network:\n",
			cfg(defTool("t", 2)),
		},
		{
			"full",
			full,
			cfg(fetch, b2, defTool("9lives", 37)),
		},
		{
			"quoted and tagged scalars",
			lines("tools:", "  t:", `    limits: {pids: "64", memory: !!str 1GiB, cpu: "500m"}`, `    network: {connections: !!int 7}`, "    egress:", "      - host: a.example", "        private: false"),
			cfg(func() *Tool {
				tl := defTool("t", 2)
				tl.Limits = Limits{Pids: new(int64(64)), Memory: new(int64(1 << 30)), CPUMilli: new(int64(500))}
				tl.Network.Connections = 7
				tl.Egress = []policy.Destination{dest(t, policy.Spec{Host: "a.example"})}
				return tl
			}()),
		},
		{
			"crlf and bounds",
			"tools:\r\n  t:\r\n    network: {connections: 65536, dns_rate: 10000, bytes: 1}\r\n    limits: {cpu: none, fds: 1048576}\r\n",
			cfg(func() *Tool {
				tl := defTool("t", 2)
				tl.Network = Network{Connections: 65536, DNSRate: 10000, Bytes: 1, WildcardNames: 64}
				tl.Limits = Limits{CPUMilli: new(int64(0)), FDs: new(int64(1 << 20))}
				return tl
			}()),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("a.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse:\ngot  %s\nwant %s", dump(got), dump(tt.want))
			}
		})
	}
}

// dump prints a config with its tools, services and secrets expanded, for
// failure messages.
func dump(c *Config) string {
	var b strings.Builder
	b.WriteString("{Path:" + c.Path + " Order:" + strings.Join(c.Order, ",") + " ServiceOrder:" + strings.Join(c.ServiceOrder, ",") + "}")
	for _, n := range c.Order {
		if tl := c.Tools[n]; tl != nil {
			b.WriteString("\n  " + n + ": " + strings.ReplaceAll(strings.TrimSpace(sprint(*tl)), "\n", " "))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.Services)) {
		b.WriteString("\n  service " + sprintService(c.Services[n]))
	}
	for _, n := range slices.Sorted(maps.Keys(c.Secrets)) {
		b.WriteString(fmt.Sprintf("\n  secret %+v", *c.Secrets[n]))
	}
	return b.String()
}

func TestLimitsApply(t *testing.T) {
	base := sbspec.DefaultLimits()
	tests := []struct {
		name string
		l    Limits
		want sbspec.Limits
	}{
		{"none", Limits{}, base},
		{"all", Limits{
			Memory: new(int64(1)), Pids: new(int64(2)), Disk: new(int64(3)), FDs: new(int64(4)),
			Output: new(int64(5)), CPUMilli: new(int64(6)), Time: new(time.Duration(7)), CPUTime: new(time.Duration(8)),
		}, sbspec.Limits{Memory: 1, Pids: 2, Disk: 3, Inodes: base.Inodes, FDs: 4, Output: 5, Time: 7, CPUMilli: 6, CPUTime: 8}},
		{"zero overrides", Limits{CPUMilli: new(int64(0)), CPUTime: new(time.Duration(0))}, func() sbspec.Limits {
			l := base
			l.CPUMilli, l.CPUTime = 0, 0
			return l
		}()},
		{"some", Limits{Memory: new(int64(64 << 20)), Time: new(time.Second)}, func() sbspec.Limits {
			l := base
			l.Memory, l.Time = 64<<20, time.Second
			return l
		}()},
	}
	for _, tt := range tests {
		if got := tt.l.Apply(base); got != tt.want {
			t.Errorf("%s: Apply = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestFind(t *testing.T) {
	tests := []struct {
		name     string
		explicit string
		env      string
		files    []string
		want     string
		wantErr  string
	}{
		{"nothing", "", "", nil, "", ""},
		{"system", "", "", []string{SystemPath}, SystemPath, ""},
		{"current directory never searched", "", "", []string{"airlock.yaml"}, "", ""},
		{"env before system", "", "/e.yaml", []string{"/e.yaml", SystemPath}, "/e.yaml", ""},
		{"explicit before env", "/x.yaml", "/e.yaml", []string{"/x.yaml", "/e.yaml", SystemPath}, "/x.yaml", ""},
		{"explicit missing", "/x.yaml", "", []string{SystemPath}, "", `config file "/x.yaml" (from --config) not found`},
		{"env missing", "", "/e.yaml", []string{SystemPath}, "", `config file "/e.yaml" (from $AIRLOCK_CONFIG) not found`},
	}
	for _, tt := range tests {
		getenv := func(k string) string {
			if k == PathEnv {
				return tt.env
			}
			return ""
		}
		exists := func(p string) bool {
			for _, f := range tt.files {
				if f == p {
					return true
				}
			}
			return false
		}
		got, err := Find(tt.explicit, getenv, exists)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: Find = %q, %v; want error %q matching ErrNotFound", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: Find = %q, %v; want %q, nil", tt.name, got, err, tt.want)
		}
	}
}

func TestTool(t *testing.T) {
	c, err := Parse("a.yaml", []byte("tools:\n  zeta: {}\n  alpha: {}\n  mid: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Tool("mid"); err != nil || got.Name != "mid" || got.Line != 4 {
		t.Errorf("Tool(mid) = %+v, %v; want the tool on line 4", got, err)
	}
	tests := []struct {
		c    *Config
		name string
		want string
	}{
		{c, "nope", `tool "nope" not found (known tools: alpha, mid, zeta)`},
		{Empty(), "x", `tool "x" not found (no tools are configured)`},
		{nil, "x", `tool "x" not found (no tools are configured)`},
		{c, "a\nb", `tool "a\nb" not found (known tools: alpha, mid, zeta)`},
	}
	for _, tt := range tests {
		got, err := tt.c.Tool(tt.name)
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrNotFound) {
			t.Errorf("Tool(%q) = %v, %v; want error %q matching ErrNotFound", tt.name, got, err, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(good, []byte("tools:\n  t: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(good)
	if err != nil || c.Path != good || len(c.Tools) != 1 {
		t.Fatalf("Load(good) = %+v, %v; want one tool and Path %q", c, err, good)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) error = %v; want fs.ErrNotExist", err)
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || e.File != big || e.Line != 0 || !strings.Contains(e.Msg, "larger than 1 MiB") {
		t.Errorf("Load(big) error = %v; want *Error about the size", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  t:\n    memory: 1GiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := bad + `:3:5: tools.t.memory: unknown field "memory"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load(bad) error = %v; want it to start with %q", err, want)
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.yaml")
	if err := os.WriteFile(p, []byte("tools: {t: {}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Discover(p); err != nil || c.Path != p || c.Order[0] != "t" {
		t.Errorf("Discover(%q) = %+v, %v; want the file's config", p, c, err)
	}
	if _, err := Discover(filepath.Join(dir, "none.yaml")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Discover(missing) error = %v; want ErrNotFound", err)
	}
}

func TestErrorFormat(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		e    *Error
		want string
	}{
		{&Error{File: "a.yaml", Line: 12, Column: 5, Field: "tools.x", Msg: "bad"}, "a.yaml:12:5: tools.x: bad"},
		{&Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{&Error{File: "a.yaml", Msg: "bad"}, "a.yaml: bad"},
		{&Error{Field: "f", Err: cause}, "f: cause"},
		{&Error{Msg: "m", Err: cause}, "m: cause"},
		{&Error{}, "invalid config"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.e, ErrInvalid) {
			t.Errorf("%q does not match ErrInvalid", tt.want)
		}
	}
	if e := (&Error{Err: cause}); !errors.Is(e, cause) {
		t.Errorf("errors.Is(%v, cause) = false, want true", e)
	}
}

// TestErrorClasses checks that the package's errors report their class,
// which the daemon's answers are chosen by.
func TestErrorClasses(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{&Error{File: "a.yaml", Msg: "bad"}, errdefs.ErrInvalid},
		{&Error{Err: &SecretError{Secret: "s", Problem: "unset"}}, errdefs.ErrInvalid},
		{ErrNotFound, errdefs.ErrNotFound},
		{fmt.Errorf("tool %q: %w", "x", ErrNotFound), errdefs.ErrNotFound},
		{&InputError{Input: "n", Reason: "is required"}, errdefs.ErrInvalid},
		{&SecretError{Secret: "s", Problem: "unset"}, errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		if got := errdefs.Class(tt.err); got != tt.want {
			t.Errorf("Class(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	a79 := strings.Repeat("a", 79)
	tests := []struct{ in, want string }{
		{"x", `"x"`},
		{"a\nb\x00", `"a\nb\x00"`},
		{strings.Repeat("a", 80), `"` + strings.Repeat("a", 80) + `"`},
		{strings.Repeat("a", 100), `"` + strings.Repeat("a", 80) + `"...`},
		// A cut never splits a UTF-8 sequence.
		{a79 + "é" + strings.Repeat("b", 10), `"` + a79 + `"...`},
	}
	for _, tt := range tests {
		if got := quote(tt.in); got != tt.want {
			t.Errorf("quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestNetworkLookups(t *testing.T) {
	const tool = "tools:\n  t:\n    network: {host_lookups: false, wildcard_names: 8}\n    egress:\n%s"
	c, err := Parse("a.yaml", []byte(fmt.Sprintf(tool, "      - {host: a.example, addresses: [10.0.0.7], private: true}\n      - {host: 10.1.0.0/24:443, private: true}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Tools["t"].Network; !n.NoHostLookups || n.WildcardNames != 8 {
		t.Fatalf("network %+v", n)
	}
	for _, eg := range []string{"      - b.example\n", "      - \"*.example.org\"\n"} {
		if _, err := Parse("a.yaml", []byte(fmt.Sprintf(tool, eg))); err == nil || !strings.Contains(err.Error(), "host_lookups is false") {
			t.Errorf("%q without lookups: %v", eg, err)
		}
	}
	if _, err := Parse("a.yaml", []byte("tools:\n  t:\n    network: {wildcard_names: 5000}\n")); err == nil || !strings.Contains(err.Error(), "wildcard_names") {
		t.Errorf("wildcard_names 5000: %v", err)
	}
}

// TestE2BTemplates: a tool is found by its own name and by each of its
// e2b_templates; its pool's kernels are kept in order.
func TestE2BTemplates(t *testing.T) {
	c, err := Parse("a.yaml", []byte("tools:\n  py:\n    e2b_templates: [code-interpreter-v1, base]\n    pool: {warm: 1, kernels: [python, bash]}\n  sh: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"py": "py", "code-interpreter-v1": "py", "base": "py", "sh": "sh", "other": ""} {
		got := ""
		if tl := c.E2BTemplate(name); tl != nil {
			got = tl.Name
		}
		if got != want {
			t.Errorf("E2BTemplate(%q) = %q, want %q", name, got, want)
		}
	}
	if k := c.Tools["py"].Pool.Kernels; strings.Join(k, ",") != "python,bash" {
		t.Errorf("kernels %v", k)
	}
}

// TestAdaptivePool: min and max make a pool that sizes itself, with the
// default idle time unless one is set; kernels may be started in it.
func TestAdaptivePool(t *testing.T) {
	c, err := Parse("a.yaml", []byte("tools:\n  a:\n    pool: {min: 1, max: 8}\n  b:\n    pool: {max: 4, idle: 5m, kernels: [python]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Pool{
		"a": {Min: 1, Max: 8, Idle: DefaultPoolIdle},
		"b": {Max: 4, Idle: 5 * time.Minute, Kernels: []string{"python"}},
	} {
		if got := c.Tools[name].Pool; !reflect.DeepEqual(got, want) {
			t.Errorf("tool %s: pool %+v, want %+v", name, got, want)
		}
	}
}
