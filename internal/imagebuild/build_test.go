package imagebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// buildContext lays out a build's context: a script, a directory with a
// nested file and a symlink, and beside the context a secret it must
// never reach.
func buildContext(t *testing.T) string {
	t.Helper()
	top := t.TempDir()
	dir := filepath.Join(top, "ctx")
	for p, data := range map[string]string{
		"run.sh":         "#!/bin/sh\necho running as $(id -u) in $(pwd)\n",
		"data/a.txt":     "a\n",
		"data/sub/b.txt": "b\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "secret"), []byte("the host's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret", filepath.Join(dir, "data/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func stepLimits() sandbox.Limits {
	l := sandbox.DefaultLimits()
	l.Memory, l.Pids, l.Time = 64<<20, 64, 30*time.Second
	return l
}

// TestBuild builds a Dockerfile in real sandboxes: ENV, ARG, WORKDIR,
// COPY of a file and a directory (its symlink copied as a symlink),
// a RUN that writes and removes files, USER and CMD; then runs the
// image it made, and builds it again from the cache.
func TestBuild(t *testing.T) {
	rt := runtimeFor(t)
	st, _ := baseStore(t)
	dir := buildContext(t)
	src := []byte(`FROM capture-base
ARG GREETING=hello
ENV APP=/srv/app PATH=/bin
WORKDIR $APP
COPY --chmod=0755 run.sh ./
COPY data/ data/
RUN echo "$GREETING from $(pwd)" > made.txt && rm /etc/gone && mkdir -p /home/app && chown 1000:1000 /home/app 2>/dev/null || true
USER 1000:1000
CMD ["/srv/app/run.sh"]
`)
	var progress bytes.Buffer
	o := Options{Store: st, Runtime: rt, Limits: stepLimits(), Name: "built:1", Progress: &progress}
	res, err := Build(t.Context(), o, src, dir)
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	if res.Steps != 8 || res.Cached != 0 {
		t.Errorf("steps %d, cached %d; want 8, none", res.Steps, res.Cached)
	}
	img, err := st.Resolve("built:1")
	if err != nil || img.Digest != res.Image.Digest {
		t.Fatalf("the name built:1: %v %v", img, err)
	}
	root := img.Root
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"srv/app/made.txt":       "hello from /srv/app\n",
		"srv/app/data/a.txt":     "a\n",
		"srv/app/data/sub/b.txt": "b\n",
		"etc/keep":               "k\n",
	} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "srv/app/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v %v, want mode 0755", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "srv/app/data/link")); err != nil || l != "../../secret" {
		t.Errorf("the context's symlink: %q %v; want it copied as a symlink", l, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/gone, which the RUN removed: %v", err)
	}
	c := img.Config
	if c.WorkingDir != "/srv/app" || c.User != "1000:1000" || !slices.Equal(c.Cmd, []string{"/srv/app/run.sh"}) || !slices.Contains(c.Env, "APP=/srv/app") {
		t.Errorf("config = %+v", c)
	}
	if slices.ContainsFunc(c.Env, func(e string) bool { return strings.HasPrefix(e, "GREETING=") }) {
		t.Errorf("an ARG is in the image's environment: %v", c.Env)
	}

	// The image runs.
	sb, err := rt.Create(t.Context(), sandbox.Spec{Limits: stepLimits(), Image: &sandbox.Image{Root: img.Root, Lock: img.Lock}, User: &sandbox.User{UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	r := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: c.Cmd, Env: c.Env, Dir: c.WorkingDir, Capture: true})
	sb.Destroy(context.Background())
	if r.Outcome != result.Exited || string(r.Stdout) != "running as 1000 in /srv/app\n" {
		t.Errorf("the built image's command: %s %q %q %q", r.Outcome, r.Stdout, r.Stderr, r.Error)
	}

	// Again: every step from the cache, the same image.
	progress.Reset()
	start := time.Now()
	again, err := Build(t.Context(), o, src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Image.Digest != res.Image.Digest || again.Cached != 4 {
		t.Errorf("the second build: %s, %d cached; want %s, 4 (WORKDIR, two COPYs, RUN)\n%s", again.Image.Digest, again.Cached, res.Image.Digest, progress.String())
	}
	t.Logf("the cached rebuild took %v", time.Since(start))
	// A changed file of the context: its COPY and every step after it
	// run again.
	if err := os.WriteFile(filepath.Join(dir, "data/a.txt"), []byte("A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := Build(t.Context(), o, src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if third.Cached != 2 || third.Image.Digest == res.Image.Digest {
		t.Errorf("after a context change: %d cached, digest %s; want 2 (WORKDIR, the first COPY) and a new image", third.Cached, third.Image.Digest)
	}
}

// TestBuildRefused: steps that fail say which step, its line and how; a
// source outside the context, through a symlink, is refused; a RUN has
// no network.
func TestBuildRefused(t *testing.T) {
	isolatednet.Require(t)
	rt := runtimeFor(t)
	st, _ := baseStore(t)
	dir := buildContext(t)
	tests := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"exit", "FROM capture-base\nENV PATH=/bin\nRUN exit 3\n", 3, "exit code 3"},
		{"memory", "FROM capture-base\nENV PATH=/bin\nRUN head -c 300000000 /dev/zero | tail\n", 3, "breached its memory limit"},
		{"network", "FROM capture-base\nENV PATH=/bin\nRUN echo x | nc -w 3 93.184.215.14 80\n", 3, "exit code 1"},
		{"dotdot", "FROM capture-base\nCOPY ../secret /x\n", 2, "outside the build's context"},
		{"symlink dir", "FROM capture-base\nCOPY up/secret /x\n", 2, "is a symlink"},
		{"symlink file", "FROM capture-base\nCOPY data/link /x\n", 2, "is a symlink"},
		{"missing", "FROM capture-base\nCOPY nope /x\n", 2, "not in the build's context"},
		{"into a file", "FROM capture-base\nCOPY run.sh /etc/keep/x\n", 2, "is not a directory in the image"},
		{"no match", "FROM capture-base\nCOPY *.nope /x/\n", 2, "no file of the build's context matches"},
		{"wildcard dotdot", "FROM capture-base\nCOPY ../*.txt /x/\n", 2, "outside the build's context"},
		{"bad wildcard", "FROM capture-base\nCOPY a[ /x/\n", 2, "malformed wildcard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(t.Context(), Options{Store: st, Runtime: rt, Limits: stepLimits()}, []byte(tt.src), dir)
			var se *StepError
			if !errors.As(err, &se) || se.Line != tt.line || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Build = %v; want step at line %d saying %q", err, tt.line, tt.msg)
			}
		})
	}
	if _, err := Build(t.Context(), Options{Store: st, Runtime: rt}, []byte("FROM nosuch\n"), dir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("FROM an image not stored: %v", err)
	}
}

// TestBuildEgress: a build's RUN reaches what its build named, through
// the egress gateway, and nothing else: a mirror on loopback named in
// the policy serves the step, an unnamed destination is refused, and the
// refusal is in the build's log.
func TestBuildEgress(t *testing.T) {
	isolatednet.Require(t)
	rt := runtimeFor(t)
	st, _ := baseStore(t)
	dir := buildContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "package from the mirror "+r.URL.Path+"\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	mirror, err := policy.Compile(policy.Spec{Host: fmt.Sprintf("mirror.test:%d", port), Addresses: []string{"127.0.0.1"}, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	pol := attach.Policy{Tool: "image-build", Egress: []policy.Destination{mirror}}
	var events []result.EgressEvent
	var mu sync.Mutex
	pol.OnEgress = func(ev result.EgressEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	bind := func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
		return attach.Bind(ctx, sb, pol)
	}

	var progress bytes.Buffer
	src := fmt.Sprintf("FROM capture-base\nENV PATH=/bin\nRUN wget -q -O /pkg http://mirror.test:%d/pool/tool.deb\n", port)
	res, err := Build(t.Context(), Options{Store: st, Runtime: rt, Limits: stepLimits(), Progress: &progress, Bind: bind}, []byte(src), dir)
	if err != nil {
		t.Fatalf("a build fetching from its named mirror: %v\n%s", err, progress.String())
	}
	if b, err := os.ReadFile(filepath.Join(res.Image.Root, "pkg")); err != nil || string(b) != "package from the mirror /pool/tool.deb\n" {
		t.Errorf("the fetched file in the image: %q %v", b, err)
	}

	progress.Reset()
	src = fmt.Sprintf("FROM capture-base\nENV PATH=/bin\nRUN wget -q -O /pkg http://elsewhere.test:%d/x\n", port)
	_, err = Build(t.Context(), Options{Store: st, Runtime: rt, Limits: stepLimits(), Progress: &progress, Bind: bind}, []byte(src), dir)
	var se *StepError
	if !errors.As(err, &se) || se.Line != 3 {
		t.Fatalf("a build fetching from an unnamed host = %v; want step 3 failing\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "egress denied") || !strings.Contains(progress.String(), "elsewhere.test") {
		t.Errorf("the build's log does not explain the refusal:\n%s", progress.String())
	}
	mu.Lock()
	defer mu.Unlock()
	var allowed, denied bool
	for _, ev := range events {
		allowed = allowed || ev.Allow && strings.Contains(ev.Destination, "mirror.test")
		denied = denied || !ev.Allow && strings.Contains(ev.Destination, "elsewhere.test")
	}
	if !allowed || !denied {
		t.Errorf("the gateway's decisions: %+v; want the mirror allowed and elsewhere.test denied", events)
	}
}

// TestBuildWildcards copies what a wildcard matches: files at the top,
// files in a matched directory, never through the symlink up/ (a
// directory symlink is not looked in).
func TestBuildWildcards(t *testing.T) {
	rt := runtimeFor(t)
	st, _ := baseStore(t)
	dir := buildContext(t)
	if err := os.WriteFile(filepath.Join(dir, "data/c.txt"), []byte("c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := []byte("FROM capture-base\nCOPY data/*.txt /txt/\nCOPY */sub/*.txt /sub/\nCOPY ru?.sh /one\n")
	res, err := Build(t.Context(), Options{Store: st, Runtime: rt, Limits: stepLimits()}, src, dir)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"txt/a.txt": "a\n", "txt/c.txt": "c\n", "sub/b.txt": "b\n", "one": "#!/bin/sh\necho running as $(id -u) in $(pwd)\n"} {
		if b, err := os.ReadFile(filepath.Join(res.Image.Root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q %v, want %q", p, b, err, want)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(res.Image.Root, "sub"))
	if len(ents) != 1 {
		t.Errorf("/sub has %d entries, want b.txt alone (nothing through up/)", len(ents))
	}
}
