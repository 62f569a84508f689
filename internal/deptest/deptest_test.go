// Package deptest holds tests of what each program and layer links, and
// of which files may import unsafe.
package deptest

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages pkg links, with `go list -deps`.
func deps(t *testing.T, pkg string, env ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool")
	}
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Env = append(cmd.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
	}
	var list []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		list = append(list, sc.Text())
	}
	return list
}

// TestInitIsSmall keeps the init program (every sandbox's PID 1, and the
// spawner) to what init needs: each package it links is start-up time
// and memory that every sandbox pays.
func TestInitIsSmall(t *testing.T) {
	forbidden := []string{
		"net", "net/http", "database/sql", "os/signal", "crypto/tls",
		"github.com/modelcontextprotocol/", "go.yaml.in/yaml", "gopkg.in/yaml",
		"github.com/containerd/", "google.golang.org/protobuf", "modernc.org/",
		"github.com/google/go-containerregistry",
		"github.com/airlockhq/airlock/sandbox", "github.com/airlockhq/airlock/internal/linux/cgroup",
	}
	for _, env := range [][]string{{"CGO_ENABLED=0"}, {"CGO_ENABLED=1"}} {
		for _, d := range deps(t, "github.com/airlockhq/airlock/cmd/airlock-init", env...) {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%v: cmd/airlock-init links %s (forbidden: %s)", env, d, f)
				}
			}
			if d == "runtime/cgo" {
				t.Errorf("%v: cmd/airlock-init links runtime/cgo: init must be static and confine all of its threads", env)
			}
		}
	}
}

// TestCLIIsLean keeps airlock's own program (version, help, plain runs)
// off the packages whose initialisers and size only airlockd may pay for
// (see package internal/cli): every `airlock run` starts that much faster.
// A plain run's egress gateway, which needs HTTP and DNS, is airlockd's,
// started on the sandbox's first use of the network (internal/lazygw).
func TestCLIIsLean(t *testing.T) {
	heavy := []string{
		"modernc.org/", "database/sql", "encoding/gob",
		"github.com/modelcontextprotocol/", "github.com/klauspost/compress",
		"github.com/google/go-containerregistry", "github.com/opencontainers/",
		"github.com/airlockhq/airlock/internal/daemon", "github.com/airlockhq/airlock/internal/audit",
		"github.com/airlockhq/airlock/internal/mcpserver",
		// What a plain run does without: HTTP (the gateway, the daemon's
		// client), TLS, DNS, YAML (the config), image stores.
		"net", "net/http", "crypto/tls", "crypto/x509", "crypto/rand",
		"golang.org/x/net/", "go.yaml.in/yaml", "archive/tar", "compress/gzip",
		"github.com/airlockhq/airlock/client", "github.com/airlockhq/airlock/internal/config",
		"github.com/airlockhq/airlock/internal/image", "github.com/airlockhq/airlock/internal/egress",
		"github.com/airlockhq/airlock/internal/broker", "github.com/airlockhq/airlock/internal/runner/attach",
	}
	// The exceptions: net/netip is not the net package, and the egress
	// gateway's sockets and policy packages are small, and what a plain
	// run needs of it.
	allowed := []string{
		"github.com/airlockhq/airlock/internal/egress/sockets", "github.com/airlockhq/airlock/internal/egress/policy",
		"github.com/airlockhq/airlock/internal/egress/ipclass", "net/netip",
	}
	lean := deps(t, "github.com/airlockhq/airlock/cmd/airlock", "CGO_ENABLED=0")
	if !slices.Contains(lean, "github.com/airlockhq/airlock/internal/cli") {
		t.Fatalf("go list -deps cmd/airlock: %d packages, without internal/cli", len(lean))
	}
	for _, d := range lean {
		if slices.Contains(allowed, d) {
			continue
		}
		for _, f := range heavy {
			if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("cmd/airlock links %s (only airlockd may: %s)", d, f)
			}
		}
	}
	// The heavy parts are where the commands that need them are.
	full := deps(t, "github.com/airlockhq/airlock/cmd/airlockd", "CGO_ENABLED=0")
	for _, need := range []string{"github.com/airlockhq/airlock/internal/daemon", "github.com/airlockhq/airlock/internal/image/zstd", "github.com/airlockhq/airlock/internal/egress"} {
		if !slices.Contains(full, need) {
			t.Errorf("cmd/airlockd does not link %s", need)
		}
	}
}
