package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// debianFixtures is the directory scripts/debian-fixtures makes once:
// a Debian bookworm root file system (minbase.tar) and a package it
// lacks, with its dependencies (pool/*.deb).
func debianFixtures(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AIRLOCK_TEST_DEBIAN")
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_DEBIAN is not set in CI: scripts/test makes it with scripts/debian-fixtures")
		}
		t.Skip("needs AIRLOCK_TEST_DEBIAN (scripts/debian-fixtures DIR)")
	}
	return dir
}

// flatRepo writes a flat Debian repository's index (Packages, Release)
// for the .debs of pool, as apt-ftparchive would: each package's
// control fields (dpkg-deb -f), its file, size and hash.
func flatRepo(t *testing.T, pool string) string {
	t.Helper()
	repo := t.TempDir()
	debs, _ := filepath.Glob(filepath.Join(pool, "*.deb"))
	if len(debs) == 0 {
		t.Fatalf("no .deb in %s", pool)
	}
	var pkgs bytes.Buffer
	for _, deb := range debs {
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, filepath.Base(deb)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		ctl, err := exec.Command("dpkg-deb", "-f", deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb -f %s: %v", deb, err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&pkgs, "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n", ctl, filepath.Base(deb), len(b), hex.EncodeToString(sum[:]))
	}
	if err := os.WriteFile(filepath.Join(repo, "Packages"), pkgs.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkgs.Bytes())
	release := fmt.Sprintf("Origin: airlock-test\nLabel: airlock-test\nDate: Sat, 05 Dec 2026 00:00:00 UTC\nSHA256:\n %s %d Packages\n", hex.EncodeToString(sum[:]), pkgs.Len())
	if err := os.WriteFile(filepath.Join(repo, "Release"), []byte(release), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

// TestImageBuildDebian builds, with `airlock image build`, a Dockerfile
// that installs a Debian package with apt from a mirror the build names
// (a flat repository this test serves on a private address) and copies
// a script: the image runs the package's program as a tool; built again
// no step runs; and the same build without the mirror named fails with
// the egress refusal in its output.
func TestImageBuildDebian(t *testing.T) {
	requireRoot(t)
	isolatednet.Require(t)
	fixtures := debianFixtures(t)
	// A private address of this namespace's own for the mirror: the
	// sandbox reaches it through the egress gateway (loopback would be
	// the sandbox's own, and no proxy takes it).
	const mirrorIP = "10.99.0.1"
	if out, err := exec.Command("ip", "addr", "add", mirrorIP+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("ip addr add: %v %s", err, out)
	}
	ln, err := net.Listen("tcp", mirrorIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	repo := flatRepo(t, filepath.Join(fixtures, "pool"))
	var fetched bytes.Buffer
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(&fetched, "%s\n", r.URL.Path)
		http.FileServer(http.Dir(repo)).ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	mirror := ln.Addr().String()

	tmp, err := os.MkdirTemp("/var/tmp", "airlock-cli-debian-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	store, ctx := filepath.Join(tmp, "store"), filepath.Join(tmp, "ctx")
	os.MkdirAll(ctx, 0o755)
	for name, data := range map[string]string{
		"tool.sh": "#!/bin/sh\nexec hello -g \"hello from the tool\"\n",
		"Dockerfile": `FROM debian:bookworm
RUN echo 'APT::Sandbox::User "root";' > /etc/apt/apt.conf.d/90airlock \
 && rmdir /var/lib/apt/lists/partial /var/cache/apt/archives/partial \
 && echo 'deb [trusted=yes] http://` + mirror + `/ ./' > /etc/apt/sources.list \
 && rm -f /etc/apt/sources.list.d/* \
 && apt-get update && apt-get install -y --no-install-recommends hello
COPY --chmod=0755 tool.sh /usr/local/bin/tool
CMD ["/usr/local/bin/tool"]
`,
	} {
		if err := os.WriteFile(filepath.Join(ctx, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := func(args ...string) outcome {
		return execAirlock(t, nil, "", append(append([]string{"image"}, args...), "--store", store)...)
	}
	if o := img("import", filepath.Join(fixtures, "minbase.tar"), "--name", "debian:bookworm"); o.code != 0 {
		t.Fatalf("import: %+v", o)
	}
	o := img("build", "--name", "hello-tool:1", "--allow-private", mirror, ctx)
	if o.code != 0 || !strings.Contains(o.stdout, "(3 steps, 0 cached") || !strings.Contains(o.stderr, "Setting up hello") {
		t.Fatalf("build: %+v\nthe mirror saw: %s", o, fetched.String())
	}
	if !strings.Contains(fetched.String(), "/hello_") {
		t.Errorf("the mirror served %q, no package", fetched.String())
	}
	if o := execAirlock(t, nil, "", "run", "--image-store", store, "--image", "hello-tool:1", "--", "/usr/local/bin/tool"); o.code != 0 || o.stdout != "hello from the tool\n" {
		t.Errorf("run the built image: %+v", o)
	}
	fetched.Reset()
	if o := img("build", "--name", "hello-tool:1", "--allow-private", mirror, ctx); o.code != 0 || !strings.Contains(o.stdout, "(3 steps, 2 cached") || strings.Contains(o.stderr, "apt-get") && !strings.Contains(o.stderr, "cached") {
		t.Errorf("the second build: %+v", o)
	}
	if fetched.Len() != 0 {
		t.Errorf("the cached build fetched %q", fetched.String())
	}
	// Without the mirror named: apt cannot reach it, and says why.
	if o := img("build", "--name", "nope", "--no-cache", ctx); o.code == 0 || !strings.Contains(o.stderr, "egress denied") || !strings.Contains(o.stderr, "step 1 (Dockerfile line 2") {
		t.Errorf("a build that does not name its mirror: %+v", o)
	}
}
