package deptest

import (
	"bytes"
	"maps"
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
	module + "/internal/front", module + "/internal/e2bserver", module + "/internal/edge", module + "/internal/mcpedge",
	module + "/internal/httpapi", module + "/internal/console",
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

// sortedKeys are g's packages in order, so that failures read the same
// from run to run.
func sortedKeys(g map[string][]string) []string { return slices.Sorted(maps.Keys(g)) }

// rel is pkg without the module's path, for messages.
func rel(pkg string) string { return strings.TrimPrefix(pkg, module+"/") }

// rels is rel of each of pkgs.
func rels(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = rel(p)
	}
	return out
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
				t.Errorf("%s links %s: only the standard library and %v may be linked there", rel(pkg), rel(d), rels(wireTypes))
			}
		}
	}
	// Nor do the wire types link each other, so each stays a leaf.
	for _, w := range wireTypes {
		for _, d := range depsOf(t, w) {
			if !isStd(d) {
				t.Errorf("%s links %s: wire types link the standard library only", rel(w), rel(d))
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

// configLeaves are the packages config may link: the plain values it
// fills in and the rules it checks them by, each linking only the
// standard library and other such leaves.
var configLeaves = []string{
	module + "/internal/units",             // sizes and durations
	module + "/internal/sbspec",            // a sandbox's ceilings, mounts, user
	module + "/internal/image/imageref",    // image names and digests
	module + "/internal/broker/brokerspec", // the broker's services
	module + "/internal/broker/route",      // operation templates
	module + "/internal/egress/policy",     // egress destinations
	module + "/internal/egress/ipclass",    // address classes, policy's
	module + "/internal/errdefs",           // the classes of errors
	module + "/result",                     // decision and event codes (a wire type)
}

// configMayNot are what config must never link: the runtime, the kernel
// packages and the edges. The leaves under internal/image, broker and
// egress are the exceptions; being leaves (the test checks) they bring
// none of the rest.
var configMayNot = append([]string{
	module + "/sandbox", module + "/pool", module + "/internal/image", module + "/internal/linux",
	module + "/internal/broker", module + "/internal/egress", module + "/internal/runner",
	module + "/internal/sbinit", module + "/internal/spawner",
}, edges...)

// TestConfigIsPlain keeps config a layer of plain values: it reads a file
// and emits what the runtime takes, and the runtime's packages are above
// it (attach translates). It once linked the sandbox runtime, the image
// store and through them cgroups and seccomp, so every reader of a config
// file did.
func TestConfigIsPlain(t *testing.T) {
	cfg := module + "/internal/config"
	for _, d := range depsOf(t, cfg) {
		allowed := slices.Contains(configLeaves, d)
		if p := underAny(d, configMayNot); p != "" && !allowed {
			t.Errorf("config links %s (never: %s)", rel(d), rel(p))
			continue
		}
		if !isStd(d) && !allowed && d != "go.yaml.in/yaml/v3" {
			t.Errorf("config links %s: only the standard library, YAML and %v may be linked there", rel(d), rels(configLeaves))
		}
	}
	for _, leaf := range configLeaves {
		for _, d := range depsOf(t, leaf) {
			if !isStd(d) && !slices.Contains(configLeaves, d) {
				t.Errorf("%s links %s: a leaf of config links only the standard library and the other leaves", rel(leaf), rel(d))
			}
		}
	}
}

// TestLayers checks that no package reaches what sits above its layer.
func TestLayers(t *testing.T) {
	g := graph(t)
	rules := []struct {
		pkg    string   // the package and those under it
		mayNot []string // packages it may not link, and those under them
		why    string
	}{
		{module + "/internal/broker", []string{module + "/internal/config"},
			"the broker takes brokerspec values and a Secret; attach turns a config into them"},
		{module + "/internal/image", []string{module + "/sandbox", module + "/pool"},
			"the image store sits beside the runtime; attach turns a stored image into a sandbox's"},
		{module + "/internal/front", []string{module + "/sandbox", module + "/pool", module + "/internal/node", module + "/internal/linux"},
			"the front places calls on nodes over HTTP; it links no sandbox runtime"},
	}
	// The protocol edges of a node do not link each other, nor the
	// wiring above them, and what they share (internal/edge) links none
	// of them: each translates its own wire format to the node.
	protocolEdges := []string{module + "/internal/httpapi", module + "/internal/mcpedge", module + "/internal/e2bserver", module + "/internal/console"}
	above := []string{module + "/internal/daemon", module + "/internal/cli", module + "/internal/front"}
	for _, e := range protocolEdges {
		var others []string
		for _, o := range protocolEdges {
			if o != e {
				others = append(others, o)
			}
		}
		rules = append(rules, struct {
			pkg    string
			mayNot []string
			why    string
		}{e, append(others, above...), "edges do not import each other: each translates its own wire format to the node"})
	}
	rules = append(rules, struct {
		pkg    string
		mayNot []string
		why    string
	}{module + "/internal/edge", append(slices.Clone(protocolEdges), append(above, module+"/internal/mcpserver")...), "what the edges share sits under them"})
	for _, r := range rules {
		n := 0
		for _, pkg := range sortedKeys(g) {
			if !under(pkg, r.pkg) {
				continue
			}
			n++
			for _, d := range g[pkg] {
				if p := underAny(d, r.mayNot); p != "" {
					t.Errorf("%s links %s (%s may not link %s: %s)", rel(pkg), rel(d), rel(r.pkg), rel(p), r.why)
				}
			}
		}
		if n == 0 {
			t.Errorf("no package %s", rel(r.pkg))
		}
	}
	// Nothing links the edges but the edges, and the bench (which
	// measures a whole daemon).
	for _, pkg := range sortedKeys(g) {
		if underAny(pkg, edges) != "" || under(pkg, module+"/bench") {
			continue
		}
		for _, d := range g[pkg] {
			if p := underAny(d, edges); p != "" {
				t.Errorf("%s links %s: only the edges may link %s", rel(pkg), rel(d), rel(p))
			}
		}
	}
}

// kernelAllowed are the packages outside the standard library that the
// kernel packages may link.
// errdefs, the classes of errors, is itself a leaf of the standard
// library (TestConfigIsPlain checks).
var kernelAllowed = []string{"golang.org/x/sys/unix", module + "/internal/errdefs"}

// TestKernelPackagesAreLeaves keeps the privileged, syscall-heavy
// packages under internal/linux small leaves: each links only the
// standard library, kernelAllowed and other kernel packages, so what it
// does can be read in it alone, and init, which links several, stays
// small.
func TestKernelPackagesAreLeaves(t *testing.T) {
	kernel := module + "/internal/linux"
	g := graph(t)
	n := 0
	for _, pkg := range sortedKeys(g) {
		if !under(pkg, kernel) {
			continue
		}
		n++
		for _, d := range g[pkg] {
			if !isStd(d) && !under(d, kernel) && !slices.Contains(kernelAllowed, d) {
				t.Errorf("%s links %s: a kernel package links only the standard library, %v and other packages under internal/linux", rel(pkg), rel(d), kernelAllowed)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no package under %s", kernel)
	}
}

// TestAPIErrIsLeaf keeps apierr, the native API's answers to the error
// classes, linking the wire types and errdefs only: the front, which
// may not link a node, shares it with the node's edges.
func TestAPIErrIsLeaf(t *testing.T) {
	allowed := []string{module + "/api", module + "/internal/errdefs"}
	for _, d := range depsOf(t, module+"/internal/apierr") {
		if !isStd(d) && !slices.Contains(allowed, d) {
			t.Errorf("internal/apierr links %s: only the standard library and %v may be linked there", rel(d), rels(allowed))
		}
	}
}
