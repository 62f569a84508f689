package templates

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image/dockerfile"
)

const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestConvert turns E2B's steps into the builder's, and refuses the
// malformed by index and why.
func TestConvert(t *testing.T) {
	steps, err := convert([]Step{
		{Type: "USER", Args: []string{"user"}},
		{Type: "RUN", Args: []string{"apt-get install -y x", "root"}},
		{Type: "RUN", Args: []string{"echo $HOME"}},
		{Type: "COPY", Args: []string{"app", "/opt/app", "user", "0755"}, FilesHash: hash},
		{Type: "ENV", Args: []string{"A", "1", "B", "two words"}},
		{Type: "WORKDIR", Args: []string{"/opt/app"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, s := range steps {
		kinds = append(kinds, s.Kind+":"+s.Value+":"+s.User)
	}
	// A RUN of its own user carries it; the USER in effect stays.
	want := []string{"USER:user:", "RUN::root", "RUN::", "COPY::", "ENV::", "WORKDIR:/opt/app:"}
	if !slices.Equal(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
	if r := steps[1]; !slices.Equal(r.Args, []string{"/bin/sh", "-c", "apt-get install -y x"}) {
		t.Errorf("RUN args = %q", r.Args)
	}
	if c := steps[3]; c.Kind != dockerfile.Copy || c.Chown != "user" || c.Chmod != "0755" || c.Dest != "/opt/app" || !slices.Equal(c.Sources, []string{"app"}) {
		t.Errorf("COPY = %+v", c)
	}
	if e := steps[4]; len(e.Pairs) != 2 || e.Pairs[1].Value != "two words" {
		t.Errorf("ENV = %+v", e.Pairs)
	}

	for _, tt := range []struct {
		name string
		in   Step
		says string
	}{
		{"unknown", Step{Type: "ADD", Args: []string{"a", "b"}}, "airlock builds RUN, COPY"},
		{"empty run", Step{Type: "RUN", Args: []string{""}}, "want the command"},
		{"copy without hash", Step{Type: "COPY", Args: []string{"a", "/b"}}, "filesHash"},
		{"copy bad mode", Step{Type: "COPY", Args: []string{"a", "/b", "", "9x"}, FilesHash: hash}, "octal mode"},
		{"env odd", Step{Type: "ENV", Args: []string{"A"}}, "in pairs"},
		{"env name", Step{Type: "ENV", Args: []string{"A=B", "c"}}, "not a variable name"},
		{"nul", Step{Type: "RUN", Args: []string{"a\x00b"}}, "NUL"},
		{"workdir", Step{Type: "WORKDIR"}, "one directory"},
		{"user", Step{Type: "USER", Args: []string{"a", "b"}}, "one user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := convert([]Step{{Type: "ENV", Args: []string{"X", "1"}}, tt.in})
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "steps[1]") || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("convert = %v, want steps[1] refused saying %q", err, tt.says)
			}
		})
	}
}

func TestSplitName(t *testing.T) {
	for _, tt := range []struct{ in, name, tag string }{
		{"tool", "tool", DefaultTag},
		{"tool:v1.2", "tool", "v1.2"},
		{"a_b-c.d:x", "a_b-c.d", "x"},
	} {
		if n, tg, err := SplitName(tt.in); err != nil || n != tt.name || tg != tt.tag {
			t.Errorf("SplitName(%q) = %q %q %v", tt.in, n, tg, err)
		}
	}
	for _, bad := range []string{"", ":v1", "tool:", "Tool", "a b", "a/b", "a:b:c", strings.Repeat("a", 65)} {
		if _, _, err := SplitName(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("SplitName(%q) = %v, want invalid", bad, err)
		}
	}
}

// TestOwners: a template, its builds, its upload links and its uploads
// are their owner's: another owner finds none of them, and the same
// name is another template of its own.
func TestOwners(t *testing.T) {
	dir := t.TempDir()
	m, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Request("token:a", "tool", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("token:b", "tool"); ok {
		t.Error("b sees a's template by name")
	}
	if _, ok := m.Get("token:b", a.TemplateID); ok {
		t.Error("b sees a's template by id")
	}
	if _, err := m.Status("token:b", a.TemplateID, a.BuildID, 0); !errdefs.IsNotFound(err) {
		t.Errorf("b's status of a's build: %v", err)
	}
	if _, _, err := m.FileLink("token:b", a.TemplateID, hash); !errdefs.IsNotFound(err) {
		t.Errorf("b's upload link for a's template: %v", err)
	}
	present, secret, err := m.FileLink("token:a", a.TemplateID, hash)
	if err != nil || present || secret == "" {
		t.Fatalf("a's upload link: %v %v %q", present, err, secret)
	}
	if err := m.Upload(secret, bytes.NewReader([]byte("tar")), 1<<10); err != nil {
		t.Fatal(err)
	}
	if err := m.Upload(secret, bytes.NewReader([]byte("again")), 1<<10); !errdefs.IsNotFound(err) {
		t.Errorf("a link used twice: %v", err)
	}
	if present, _, _ := m.FileLink("token:a", a.TemplateID, hash); !present {
		t.Error("a's upload is not present")
	}
	b, err := m.Request("token:b", "tool", []string{"v2"})
	if err != nil || b.TemplateID == a.TemplateID || !slices.Equal(b.Tags, []string{DefaultTag, "v2"}) {
		t.Fatalf("b's template of the same name: %+v %v", b, err)
	}
	if present, _, _ := m.FileLink("token:b", b.TemplateID, hash); present {
		t.Error("b finds a's upload")
	}
	_, secret, _ = m.FileLink("token:b", b.TemplateID, strings.Repeat("f", 64))
	if err := m.Upload(secret, bytes.NewReader(make([]byte, 2<<10)), 1<<10); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("an upload over the ceiling: %v", err)
	}
	if ents, _ := os.ReadDir(m.ownerDir("token:b")); len(ents) != 0 {
		t.Errorf("the refused upload left %d files", len(ents))
	}
	// Kept across a restart.
	m2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, ok := m2.Get("token:a", "tool"); !ok || tpl.ID != a.TemplateID {
		t.Errorf("after a reopen: %+v %v", tpl, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, "templates.json")); err != nil {
		t.Error(err)
	}
}

// FuzzConvert: no body of steps makes convert panic, and what it takes
// is steps the builder knows.
func FuzzConvert(f *testing.F) {
	f.Add(`[{"type":"RUN","args":["echo hi","root"]},{"type":"COPY","args":["a","/b","","0644"],"filesHash":"` + hash + `"}]`)
	f.Add(`[{"type":"ENV","args":["A","1"]},{"type":"WORKDIR","args":["/x"]},{"type":"USER","args":["u"]}]`)
	f.Fuzz(func(t *testing.T, body string) {
		var steps []Step
		if json.Unmarshal([]byte(body), &steps) != nil {
			return
		}
		out, err := convert(steps)
		if err != nil {
			return
		}
		for _, s := range out {
			switch s.Kind {
			case dockerfile.Run, dockerfile.Copy, dockerfile.Env, dockerfile.Workdir, dockerfile.User:
			default:
				t.Fatalf("convert made a %q step", s.Kind)
			}
		}
	})
}
