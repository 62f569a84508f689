package config

import "testing"

func TestParseIsolation(t *testing.T) {
	c, err := Parse("a.yaml", []byte(`tools:
  untrusted:
    isolation: gvisor
    limits: {memory: 64MiB, pids: 64}
  plain:
    isolation: namespaces
  default: {}
  imaged:
    image: py
    isolation: gvisor
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"untrusted": "gvisor", "plain": "", "default": "", "imaged": "gvisor"} {
		if got := c.Tools[name].Isolation; got != want {
			t.Errorf("tool %s: isolation %q, want %q", name, got, want)
		}
	}
}
