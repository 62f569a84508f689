package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// matrixFeatures are the compatibility matrix's columns, in the probes'
// order (testdata/e2b_matrix.mjs and .py).
var matrixFeatures = []string{"lifecycle", "commands", "files", "watch", "pty", "ports", "interpreter", "pause", "snapshots", "volumes", "network", "metrics"}

// matrixSDK is one SDK the matrix probes: its language and version, and
// the command that runs its probe.
type matrixSDK struct {
	lang, version string
	argv          []string
	env           []string
}

// matrixCell is one probe's answer.
type matrixCell struct {
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// TestE2BMatrix runs the compatibility matrix's probes with each E2B SDK
// the test script installs (JS at the oldest supported version, the
// version before create moved to /v2 and the newest pinned; Python at
// the newest pinned), one probe per feature, against one daemon, and
// checks that docs/e2b.md's matrix is what they saw: no probe may fail,
// and the doc may not say other than the tests. AIRLOCK_UPDATE_DOCS=1
// writes the doc's matrix instead. With AIRLOCK_TEST_E2B_LATEST (a
// directory where scripts/e2b-latest installed the newest published
// SDKs) the probes run with those instead, and the doc is not checked:
// an SDK release that breaks airlock fails the run.
func TestE2BMatrix(t *testing.T) {
	isolatednet.Require(t)
	clientsNotRaced(t)
	hostOnly(t)
	needKernel(t)
	sdks, pinned := matrixSDKs(t)
	base := serveE2BWith(t, "  code-interpreter-v1: {}\n", func(o *Options) { o.Config.Server.E2BDomain = "sandbox.test" })
	got := map[string]map[string]matrixCell{}
	for _, sdk := range sdks {
		row := sdk.lang + " " + sdk.version
		cmd := exec.CommandContext(t.Context(), sdk.argv[0], sdk.argv[1:]...)
		cmd.Env = append(append(os.Environ(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "PYTHONDONTWRITEBYTECODE=1"), sdk.env...)
		cmd.WaitDelay = 5 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		outb, err := cmd.Output()
		t.Logf("%s (%v):\n%s", row, time.Since(start).Round(time.Millisecond), outb)
		cells := map[string]matrixCell{}
		for k, v := range scriptSteps(outb) {
			var c matrixCell
			if json.Unmarshal(v, &c) == nil {
				cells[k] = c
			}
		}
		if err != nil {
			t.Errorf("%s: the probe: %v\n%s", row, err, stderr.String())
		}
		for _, f := range matrixFeatures {
			c, ok := cells[f]
			switch {
			case !ok:
				t.Errorf("%s: %s: no answer from the probe", row, f)
			case c.Result == "fails":
				t.Errorf("%s: %s fails: %s", row, f, c.Detail)
			}
		}
		got[row] = cells
	}
	table := renderMatrix(sdks, got)
	if !pinned {
		t.Logf("the matrix with these SDKs:\n%s", table)
		return
	}
	doc := filepath.Join("..", "..", "docs", "e2b.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- e2b-matrix: written by TestE2BMatrix -->\n", "<!-- /e2b-matrix -->\n"
	i, j := bytes.Index(b, []byte(begin)), bytes.Index(b, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s has no matrix between %q and %q", doc, begin, end)
	}
	have := string(b[i+len(begin) : j])
	if have == table {
		return
	}
	if os.Getenv("AIRLOCK_UPDATE_DOCS") == "1" {
		nb := slices.Concat(b[:i+len(begin)], []byte(table), b[j:])
		if err := os.WriteFile(doc, nb, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the matrix into %s", doc)
		return
	}
	t.Errorf("docs/e2b.md's matrix is not what the probes saw (AIRLOCK_UPDATE_DOCS=1 writes it); they saw:\n%s", table)
}

// matrixSDKs are the SDKs to probe, and whether they are the pinned set
// (whose matrix the doc holds).
func matrixSDKs(t *testing.T) ([]matrixSDK, bool) {
	t.Helper()
	if latest := os.Getenv("AIRLOCK_TEST_E2B_LATEST"); latest != "" {
		js := filepath.Join(latest, "js", "node_modules")
		return []matrixSDK{
			jsSDK(t, js, ""),
			pySDK(t, filepath.Join(latest, "py", "bin", "python"), false),
		}, false
	}
	var sdks []matrixSDK
	for _, env := range []string{"AIRLOCK_TEST_E2B_OLDEST_MODULES", "AIRLOCK_TEST_E2B_OLD_MODULES", "AIRLOCK_TEST_E2B_MODULES"} {
		dir := os.Getenv(env)
		if dir == "" {
			t.Skipf("%s is not set (scripts/test installs the E2B SDKs)", env)
		}
		interp := ""
		if env == "AIRLOCK_TEST_E2B_MODULES" {
			interp = filepath.Join(dir, "@e2b", "code-interpreter", "dist", "index.mjs")
		}
		sdks = append(sdks, jsSDK(t, dir, interp))
	}
	// An older Python SDK, alone in a virtualenv of its own.
	old := os.Getenv("AIRLOCK_TEST_PY_OLD")
	if old == "" {
		t.Skip("AIRLOCK_TEST_PY_OLD is not set (scripts/test makes the older Python SDK's virtualenv)")
	}
	sdks = append(sdks, pySDK(t, old, false), pySDK(t, e2bPython(t), true))
	return sdks, true
}

// jsSDK is the JS SDK installed in the node_modules dir; interp, if
// not empty, is the code interpreter's SDK to probe with it.
func jsSDK(t *testing.T, dir, interp string) matrixSDK {
	t.Helper()
	var pkg struct{ Version string }
	b, err := os.ReadFile(filepath.Join(dir, "e2b", "package.json"))
	if err != nil || json.Unmarshal(b, &pkg) != nil || pkg.Version == "" {
		t.Fatalf("no E2B SDK in %s: %v", dir, err)
	}
	s := matrixSDK{lang: "JS", version: pkg.Version, argv: []string{"node", "testdata/e2b_matrix.mjs"},
		env: []string{"E2B_SDK=" + filepath.Join(dir, "e2b", "dist", "index.mjs")}}
	if interp != "" {
		s.env = append(s.env, "E2B_INTERPRETER_SDK="+interp)
	}
	return s
}

// pySDK is the Python SDK of the virtualenv whose python is py.
func pySDK(t *testing.T, py string, interp bool) matrixSDK {
	t.Helper()
	out, err := exec.Command(py, "-c", "from importlib.metadata import version; print(version('e2b'))").Output()
	if err != nil {
		t.Fatalf("%s has no e2b: %v", py, err)
	}
	s := matrixSDK{lang: "Python", version: strings.TrimSpace(string(out)), argv: []string{py, "testdata/e2b_matrix.py"}}
	if interp {
		s.env = append(s.env, "E2B_INTERPRETER=1")
	}
	return s
}

// renderMatrix is the doc's matrix: a row per SDK, a column per feature,
// and each refusal's reason once below.
func renderMatrix(sdks []matrixSDK, got map[string]map[string]matrixCell) string {
	var b strings.Builder
	b.WriteString("| SDK | " + strings.Join(matrixFeatures, " | ") + " |\n|---" + strings.Repeat("|---", len(matrixFeatures)) + "|\n")
	var reasons []string
	for _, sdk := range sdks {
		row := sdk.lang + " " + sdk.version
		b.WriteString("| " + row)
		for _, f := range matrixFeatures {
			c := got[row][f]
			word := map[string]string{"works": "works", "refused": "refused", "absent": "not in this SDK", "untested": "not tested", "fails": "**fails**"}[c.Result]
			if c.Result == "refused" {
				r := fmt.Sprintf("%s: %s", f, c.Detail)
				if !slices.Contains(reasons, r) {
					reasons = append(reasons, r)
				}
			}
			b.WriteString(" | " + word)
		}
		b.WriteString(" |\n")
	}
	if len(reasons) > 0 {
		b.WriteString("\nRefused, with the reason the SDK reports:\n\n")
		for _, r := range reasons {
			b.WriteString("- " + r + "\n")
		}
	}
	return b.String()
}
