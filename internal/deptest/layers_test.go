package deptest

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// module is airlock's module path.
const module = "github.com/airlockhq/airlock"

// The layers, top to bottom of what may import what: wire types (api,
// result) ← config ← runtime and policy (sandbox, pool, image, egress,
// broker, runner) ← edges (daemon, command line, MCP surface, programs).
// A package may import from its own layer and those to its left, never
// from one to its right; the rules below name the edges that matter.

// wireTypes are the packages of values on the wire, which the Go client
// carries: they link the standard library only.
var wireTypes = []string{module + "/api", module + "/result"}

// edges are the daemon, the command line, the MCP surface and the
// programs: nothing below them may import them.
var edges = []string{
	module + "/internal/daemon", module + "/internal/cli", module + "/internal/mcpserver", module + "/cmd",
}

var (
	graphOnce sync.Once
	graphDeps map[string][]string
	graphErr  string
)

// graph maps every package of the module to the packages it links, from
// one `go list -deps` of the whole module (tests excluded).
func graph(t *testing.T) map[string][]string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool")
	}
	graphOnce.Do(func() {
		cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...")
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			graphErr = "go list " + module + "/...: " + err.Error() + "\n" + stderr.String()
			return
		}
		graphDeps = make(map[string][]string)
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) > 0 {
				graphDeps[f[0]] = f[1:]
			}
		}
	})
	if graphErr != "" {
		t.Fatal(graphErr)
	}
	return graphDeps
}

// depsOf is what pkg links, failing the test if pkg is not in the module.
func depsOf(t *testing.T, pkg string) []string {
	t.Helper()
	d, ok := graph(t)[pkg]
	if !ok {
		t.Fatalf("go list does not know %s", pkg)
	}
	return d
}

// isStd reports whether pkg is of the standard library (its vendored
// golang.org/x packages included): its first element has no dot.
func isStd(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".")
}

// under reports whether pkg is prefix or inside it.
func under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// underAny returns the first of prefixes pkg is under, or "".
func underAny(pkg string, prefixes []string) string {
	for _, p := range prefixes {
		if under(pkg, p) {
			return p
		}
	}
	return ""
}

// head is the first n lines of out.
func head(out []byte, n int) string {
	lines := strings.SplitAfter(string(out), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…\n")
	}
	return strings.Join(lines, "")
}

// TestWireTypesAreStdlib keeps the API's types and the Go client to the
// standard library, so that any program can talk to a daemon without
// linking the sandbox runtime, and on any platform (see
// TestClientIsPortable). The client once linked the pool package for one
// struct, and with it the sandbox runtime, cgroups, seccomp and x/sys: 15
// packages more than the wire types, and no build for macOS or Windows.
func TestWireTypesAreStdlib(t *testing.T) {
	for _, pkg := range append(slices.Clone(wireTypes), module+"/client") {
		for _, d := range depsOf(t, pkg) {
			if !isStd(d) && !slices.Contains(wireTypes, d) {
				t.Errorf("%s links %s: only the standard library and %v may be linked there", pkg, d, wireTypes)
			}
		}
	}
	// Nor do the wire types link each other, so each stays a leaf.
	for _, w := range wireTypes {
		for _, d := range depsOf(t, w) {
			if !isStd(d) {
				t.Errorf("%s links %s: wire types link the standard library only", w, d)
			}
		}
	}
}

// TestClientIsPortable builds the Go client for platforms other than the
// one airlock runs on: a program that drives a daemon over TCP may run
// anywhere.
func TestClientIsPortable(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool")
	}
	for _, target := range []string{"darwin/amd64", "darwin/arm64", "windows/amd64", "linux/arm64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		cmd := exec.Command("go", "build", module+"/client", module+"/api", module+"/result")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s GOARCH=%s go build ./client: %v\n%s", goos, goarch, err, head(out, 10))
		}
	}
}
