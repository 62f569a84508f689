package config

import (
	"errors"
	"path"
	"testing"

	"github.com/airlockhq/airlock/sandbox"
)

// FuzzParse checks that Parse never panics, that every error is an *Error
// with a sane position, and that every accepted config keeps the promises
// of the types.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"tools:\n  t:\n",
		"tools:\n  fetch:\n    description: x\n    image: host\n    workdir: /w\n    env: {A: b, N: 5}\n" +
			"    limits: {memory: 256MiB, pids: 64, disk: 64MiB, fds: 256, output: 1MiB, time: 30s, cpu: 0.5, cpu_time: 0}\n" +
			"    egress:\n      - api.github.com\n      - \"*.example.com:443\"\n      - 140.82.112.0/20:443\n" +
			"      - {host: m.internal, ports: [443], addresses: [10.0.0.5], private: true}\n" +
			"    network: {connections: 1, bytes: 1GiB, dns_rate: 100}\n",
		"a: &x [1]\nb: *x\n",
		"tools: !!map {t: !foo x}\n",
		"- [[[[[[[[]]]]]]]]\n",
		"tools:\n  t: {\n",
		"---\n...\n---\n",
		"tools:\n  <<: {a: 1}\n",
		"tools:\n  t: {limits: {pids: 010, memory: 1e9}}\n",
		"\xef\xbb\xbftools: {}\n",
		"tools:\n  ? [a]\n  : b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if e.Line < 0 || e.Column < 0 || e.File != "f.yaml" || !errors.Is(err, ErrInvalid) {
				t.Fatalf("bad error %#v", e)
			}
			if c != nil {
				t.Fatalf("Parse returned a config with error %v", err)
			}
			return
		}
		if len(c.Order) != len(c.Tools) {
			t.Fatalf("%d names in Order, %d tools", len(c.Order), len(c.Tools))
		}
		for _, name := range c.Order {
			tl := c.Tools[name]
			switch {
			case tl == nil || tl.Name != name:
				t.Fatalf("Order names %q, Tools has %+v", name, tl)
			case !validToolName(name):
				t.Fatalf("invalid tool name %q accepted", name)
			case !path.IsAbs(tl.Workdir) || path.Clean(tl.Workdir) != tl.Workdir:
				t.Fatalf("workdir %q accepted", tl.Workdir)
			case tl.Image != ImageHost:
				t.Fatalf("image %q accepted", tl.Image)
			case tl.Network.Connections < 1 || tl.Network.Connections > maxConnections ||
				tl.Network.DNSRate < 1 || tl.Network.DNSRate > maxDNSRate || tl.Network.Bytes < 1:
				t.Fatalf("network %+v accepted", tl.Network)
			case tl.Line < 1:
				t.Fatalf("tool %q on line %d", name, tl.Line)
			}
			if err := tl.Limits.Apply(sandbox.DefaultLimits()).Validate(); err != nil {
				t.Fatalf("limits of %q accepted but invalid: %v", name, err)
			}
		}
	})
}
