package deptest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// coreMayNotImport are what the core's own files may not import: HTTP
// and the edges. The core (internal/node) is the lifecycles of runs and
// sessions; each protocol is an edge that translates its wire format to
// it and maps its errors once, at its boundary. HTTP in the core would
// put one protocol's statuses and requests back into what every protocol
// shares. (Packages it links may serve HTTP themselves, as the egress
// proxy and the broker do: the rule is on the core's own code.)
var coreMayNotImport = []string{
	"net/http", module + "/internal/httpx", module + "/internal/edge", module + "/internal/e2b", module + "/internal/mcpserver",
	"github.com/modelcontextprotocol/go-sdk",
}

// TestCoreHasNoHTTP checks the imports of the core's own files.
func TestCoreHasNoHTTP(t *testing.T) {
	dir := filepath.Join(moduleRoot(t), "internal", "node")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		n++
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if slices.ContainsFunc(coreMayNotImport, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") }) ||
				underAny(path, edges) != "" {
				t.Errorf("internal/node/%s imports %s: the core has no HTTP and no edge in it", name, path)
			}
		}
	}
	if n == 0 {
		t.Fatal("no files in internal/node")
	}
}
