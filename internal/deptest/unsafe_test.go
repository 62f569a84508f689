package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The build-constraint suffixes a file name may carry after its "_unsafe"
// element (go/build's lists of known GOOS and GOARCH values).
var (
	knownOS = []string{
		"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
		"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos",
	}
	knownArch = []string{
		"386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64",
		"mips", "mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le",
		"ppc", "ppc64", "ppc64le", "riscv", "riscv64", "s390", "s390x", "sparc", "sparc64", "wasm",
	}
)

// unsafeName reports whether a file named name may import "unsafe": its
// name, less ".go", then less "_test", then less one build-constraint
// suffix ("_GOOS", "_GOARCH" or "_GOOS_GOARCH"), ends in "_unsafe". So
// child_unsafe.go, sys_unsafe_test.go, install_unsafe_linux.go and
// vfork_unsafe_linux_amd64_test.go may; unsafe.go, install_linux.go and
// unsafe_helpers.go may not.
func unsafeName(name string) bool {
	stem, ok := strings.CutSuffix(name, ".go")
	if !ok {
		return false
	}
	stem = strings.TrimSuffix(stem, "_test")
	if i := strings.LastIndexByte(stem, '_'); i >= 0 && slices.Contains(knownArch, stem[i+1:]) {
		stem = stem[:i]
	}
	if i := strings.LastIndexByte(stem, '_'); i >= 0 && slices.Contains(knownOS, stem[i+1:]) {
		stem = stem[:i]
	}
	return strings.HasSuffix(stem, "_unsafe")
}

func TestUnsafeName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"child_unsafe.go", true},
		{"sys_unsafe_test.go", true},
		{"install_unsafe_linux.go", true},
		{"install_unsafe_linux_test.go", true},
		{"vfork_unsafe_amd64.go", true},
		{"vfork_unsafe_linux_amd64_test.go", true},
		{"unsafe.go", false},
		{"unsafe_test.go", false},
		{"install_linux.go", false},
		{"sys.go", false},
		{"unsafe_helpers.go", false},
		{"sys_unsafe_helpers.go", false},
		{"sys_unsafe.go.orig", false},
		{"sys_unsafe_amd64_linux.go", false}, // GOOS comes before GOARCH
	}
	for _, tt := range tests {
		if got := unsafeName(tt.name); got != tt.want {
			t.Errorf("unsafeName(%q) = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// TestUnsafeInUnsafeFiles keeps every use of package unsafe where a
// reviewer looks for it (house style, after gVisor): a .go file of the
// module that imports "unsafe" must be named as unsafeName allows, tests
// and files for one GOOS or GOARCH included. Generated files (a "Code
// generated ... DO NOT EDIT." line, see ast.IsGenerated) are exempt, and
// so is what the go tool ignores: testdata, and directories whose names
// or files whose names begin with "." or "_".
func TestUnsafeInUnsafeFiles(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || !d.Type().IsRegular() {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) || unsafeName(name) {
			return nil
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "unsafe" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports unsafe: move what uses it to a file named *_unsafe.go (or *_unsafe_test.go, *_unsafe_GOOS.go)", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no .go files below %s", root)
	}
}

// moduleRoot is the directory of the module's go.mod, found from the
// test's working directory (its package's directory) upwards.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
