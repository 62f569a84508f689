package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/testutil"
)

// TestImageRun imports a root file system holding a static test program,
// runs commands from it (by flag and through a tool of the config), and
// removes it, refused while a tool uses it.
func TestImageRun(t *testing.T) {
	requireRoot(t)
	tmp, err := os.MkdirTemp("/var/tmp", "airlock-cli-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	store := filepath.Join(tmp, "store")
	tree := filepath.Join(tmp, "tree")
	prog, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testprog"))
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range map[string]string{"bin/t": string(prog), "etc/resolv.conf": "nameserver 9.9.9.9\n", "data/hello": "from the image\n"} {
		os.MkdirAll(filepath.Join(tree, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(tree, p), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img := func(args ...string) outcome {
		return execAirlock(t, nil, "", append(append([]string{"image"}, args...), "--store", store)...)
	}
	if o := img("import", tree, "--name", "tiny"); o.code != 0 || !strings.HasPrefix(o.stdout, "tiny sha256:") {
		t.Fatalf("import: %+v", o)
	}
	if o := img("import", tree, "--name", "tiny"); o.code != 0 || !strings.Contains(o.stdout, "already stored") {
		t.Errorf("second import: %+v", o)
	}
	// From standard input: the same tree as a tarball is the same image.
	tarball, err := exec.Command("tar", "-C", tree, "-cf", "-", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if o := execAirlock(t, nil, string(tarball), "image", "import", "-", "--store", store); o.code == 0 || !strings.Contains(o.stderr, "--name") {
		t.Errorf("a root file system from stdin without a name: %+v", o)
	}
	if o := execAirlock(t, nil, string(tarball), "image", "import", "-", "--name", "from-stdin", "--store", store); o.code != 0 || !strings.HasPrefix(o.stdout, "from-stdin sha256:") {
		t.Errorf("import from stdin: %+v", o)
	}
	if o := img("ls"); o.code != 0 || !strings.Contains(o.stdout, "tiny") || !strings.Contains(o.stdout, "rootfs") {
		t.Errorf("ls: %+v", o)
	}
	// One not there: the answer lists the images that are.
	for _, sub := range []string{"rm", "inspect"} {
		if o := img(sub, "nosuch"); o.code == 0 || !strings.Contains(o.stderr, `no image "nosuch" in the store `+store+"; it has: from-stdin, tiny") || strings.Contains(o.stderr, "import it") {
			t.Errorf("%s nosuch: %+v", sub, o)
		}
	}
	if o := img("inspect", "tiny"); o.code != 0 || !strings.Contains(o.stdout, `"format": "rootfs"`) {
		t.Errorf("inspect: %+v", o)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--image", "tiny", "--", "/bin/t", "cat", "/data/hello"}, `"value":"from the image\n"`},
		{[]string{"--image", "tiny", "--", "/bin/t", "cat", "/etc/resolv.conf"}, `"value":"nameserver 127.0.0.53`},
		{[]string{"--image", "tiny", "--", "/bin/t", "write", "/data/x", "y"}, `"ok":false`},
		{[]string{"--image", "tiny", "--", "/bin/t", "stat", "/data/hello"}, `"value":"0:0:100755"`},
	} {
		o := airlock(t, "", append([]string{"--image-store", store}, tt.args...)...)
		if o.code != 0 || !strings.Contains(o.stdout, tt.want) {
			t.Errorf("run %v: %+v, want %s", tt.args, o, tt.want)
		}
	}
	if o := airlock(t, "", "--image-store", store, "--image", "absent", "--", "/bin/t", "id"); o.code == 0 || !strings.Contains(o.stderr, "no such image") {
		t.Errorf("absent image: %+v", o)
	}
	// Tools name the image; the store comes from the config file.
	cfg := filepath.Join(tmp, "airlock.yaml")
	os.WriteFile(cfg, []byte("images:\n  store: "+store+"\n"+`tools:
  tiny-tool:
    image: tiny
    env:
      GREETING: hi
  as-user:
    image: tiny
    user: "4242:4343"
  installer:
    image: tiny
    user: "0"
    rootfs: writable
`), 0o644)
	for _, tt := range []struct {
		tool string
		args []string
		want string
	}{
		{"tiny-tool", []string{"env", "GREETING"}, `"value":"hi"`},
		{"as-user", []string{"id"}, `"value":"4242:4343 /workspace"`},
		{"installer", []string{"write", "/data/x", "y"}, `"ok":true`},
		{"tiny-tool", []string{"write", "/data/x", "y"}, `"ok":false`},
	} {
		o := airlock(t, "", append([]string{"--config", cfg, "--tool", tt.tool, "--socket", filepath.Join(tmp, "none.sock"), "--", "/bin/t"}, tt.args...)...)
		if o.code != 0 || !strings.Contains(o.stdout, tt.want) {
			t.Errorf("tool %s %v: %+v, want %s", tt.tool, tt.args, o, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(store, "sha256")); err != nil {
		t.Fatal(err)
	}
	if o := img("rm", "tiny", "--config", cfg); o.code == 0 || !strings.Contains(o.stderr, "tool \"tiny-tool\"") && !strings.Contains(o.stderr, "tool \"as-user\"") && !strings.Contains(o.stderr, "tool \"installer\"") {
		t.Errorf("rm of a configured tool's image: %+v", o)
	}
	if o := img("rm", "tiny", "--config", cfg, "--force"); o.code != 0 || !strings.Contains(o.stdout, "content sha256:") {
		t.Errorf("forced rm: %+v", o)
	}
	if o := img("rm", "from-stdin"); o.code != 0 {
		t.Errorf("rm from-stdin: %+v", o)
	}
	if o := img("ls"); strings.Contains(o.stdout, "tiny") || strings.Contains(o.stdout, "from-stdin") {
		t.Errorf("still listed: %+v", o)
	}
	if ents, _ := os.ReadDir(filepath.Join(store, "sha256")); len(ents) != 0 {
		t.Errorf("content left: %v", ents)
	}
}

// TestImagePull: airlock image pull from a real registry on loopback,
// with the credential the config names, progress on standard error; the
// pulled image then runs; a second pull fetches nothing.
func TestImagePull(t *testing.T) {
	requireRoot(t)
	host, _ := imagetest.Registry(t, "ci", "registry-pw-0123")
	ref := host + "/tools/t:1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, imagetest.Tool(t, runtime.GOARCH), remote.WithAuth(&authn.Basic{Username: "ci", Password: "registry-pw-0123"})); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("/var/tmp", "airlock-cli-pull-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	store := filepath.Join(tmp, "store")
	cfg := writeConfig(t, "secrets:\n  reg: {env: TEST_REGISTRY_PW}\nimages:\n  registries:\n    \""+host+"\": {username: ci, secret: reg}\n")
	env := []string{"TEST_REGISTRY_PW=registry-pw-0123"}
	if o := execAirlock(t, nil, "", "image", "pull", "--config", cfg, "--store", store, ref); o.code == 0 || !strings.Contains(o.stderr, "TEST_REGISTRY_PW") {
		t.Fatalf("a pull whose secret is not set: exit %d %q", o.code, o.stderr)
	}
	o := execAirlock(t, env, "", "image", "pull", "--config", cfg, "--store", store, ref)
	if o.code != 0 || !strings.HasPrefix(o.stdout, ref+" sha256:") || !strings.Contains(o.stdout, "fetched ") || !strings.Contains(o.stderr, "layer 2/2 sha256:") {
		t.Fatalf("pull: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := execAirlock(t, env, "", "image", "pull", "--config", cfg, "--store", store, ref); o.code != 0 || !strings.Contains(o.stdout, "already stored; nothing fetched") {
		t.Fatalf("second pull: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := airlock(t, "", "--image", ref, "--image-store", store, "--", "/bin/t", "cat", "/srv/data"); o.code != 0 || !strings.Contains(o.stdout, `"value":"layer two"`) {
		t.Fatalf("run the pulled image: exit %d %q %q", o.code, o.stdout, o.stderr)
	}

	// A plain-HTTP registry on an address that is not taken for a local
	// one: refused, then allowed by --insecure, or by the config.
	plain, _ := imagetest.RegistryAt(t, "127.0.0.2:0", "ci", "registry-pw-0123")
	pref := plain + "/tools/t:2"
	if r, err = name.ParseReference(pref, name.Insecure); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, imagetest.Tool(t, runtime.GOARCH), remote.WithAuth(&authn.Basic{Username: "ci", Password: "registry-pw-0123"})); err != nil {
		t.Fatal(err)
	}
	cfg = writeConfig(t, "secrets:\n  reg: {env: TEST_REGISTRY_PW}\nimages:\n  registries:\n    \""+plain+"\": {username: ci, secret: reg}\n")
	if o := execAirlock(t, env, "", "image", "pull", "--config", cfg, "--store", store, pref); o.code == 0 || !strings.Contains(o.stderr, "HTTP response to HTTPS client") {
		t.Fatalf("a pull over HTTPS from a plain-HTTP registry: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	if o := execAirlock(t, env, "", "image", "pull", "--config", cfg, "--store", store, "--insecure", "--name", "via-flag", pref); o.code != 0 || !strings.Contains(o.stderr, "plain HTTP (insecure)") {
		t.Fatalf("pull --insecure: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	cfg = writeConfig(t, "secrets:\n  reg: {env: TEST_REGISTRY_PW}\nimages:\n  registries:\n    \""+plain+"\": {username: ci, secret: reg, insecure: true}\n")
	if o := execAirlock(t, env, "", "image", "pull", "--config", cfg, "--store", store, "--name", "via-config", pref); o.code != 0 || !strings.Contains(o.stdout, "via-config sha256:") {
		t.Fatalf("pull with insecure in the config: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
}

// TestImageBuild builds a Dockerfile with `airlock image build` (every
// RUN in a sandbox), runs the image it made with `airlock run --image`,
// builds it again from the cache, and reads the failures: a RUN that
// fails names its step, line and exit code; an instruction not taken is
// refused by name and line, before anything runs.
func TestImageBuild(t *testing.T) {
	requireRoot(t)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("/bin/busybox (busybox-static) is missing in CI: %v", err)
		}
		t.Skipf("needs /bin/busybox: %v", err)
	}
	tmp, err := os.MkdirTemp("/var/tmp", "airlock-cli-build-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	store, base, ctx := filepath.Join(tmp, "store"), filepath.Join(tmp, "base"), filepath.Join(tmp, "ctx")
	for p, data := range map[string]string{
		filepath.Join(base, "bin/busybox"):    string(bb),
		filepath.Join(base, "etc/passwd"):     "root:x:0:0::/root:/bin/sh\n",
		filepath.Join(ctx, "msg"):             "hello from the context\n",
		filepath.Join(ctx, "Dockerfile"):      "FROM bb\nARG WHO=airlock\nENV PATH=/bin\nCOPY msg /srv/\nRUN mkdir -p /opt && cat /srv/msg > /opt/out && echo \"built by $WHO\" >> /opt/out\nCMD [\"/bin/busybox\", \"cat\", \"/opt/out\"]\n",
		filepath.Join(ctx, "Dockerfile.fail"): "FROM bb\nENV PATH=/bin\nRUN echo about to fail && exit 7\n",
		filepath.Join(ctx, "Dockerfile.bad"):  "FROM bb\nEXPOSE 80\n",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("busybox", filepath.Join(base, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	img := func(args ...string) outcome {
		return execAirlock(t, nil, "", append(append([]string{"image"}, args...), "--store", store)...)
	}
	if o := img("import", base, "--name", "bb"); o.code != 0 {
		t.Fatalf("import: %+v", o)
	}
	o := img("build", "--name", "demo:1", "--build-arg", "WHO=the test", ctx)
	if o.code != 0 || !strings.HasPrefix(o.stdout, "demo:1 sha256:") || !strings.Contains(o.stdout, "(5 steps, 0 cached") ||
		!strings.Contains(o.stderr, "step 4/5: RUN mkdir") || !strings.Contains(o.stderr, "2 added") {
		t.Fatalf("build: %+v", o)
	}
	if o := execAirlock(t, nil, "", "run", "--image-store", store, "--image", "demo:1", "--", "/bin/busybox", "cat", "/opt/out"); o.code != 0 || o.stdout != "hello from the context\nbuilt by the test\n" {
		t.Errorf("run the built image: %+v", o)
	}
	if o := img("build", "--name", "demo:1", "--build-arg", "WHO=the test", ctx); o.code != 0 || !strings.Contains(o.stdout, "(5 steps, 2 cached") {
		t.Errorf("the cached build: %+v", o)
	}
	if o := img("build", "-f", filepath.Join(ctx, "Dockerfile.fail"), ctx); o.code == 0 || !strings.Contains(o.stderr, "about to fail") ||
		!strings.Contains(o.stderr, "step 2 (Dockerfile line 3, RUN echo about to fail && exit 7): exit code 7") {
		t.Errorf("a failing RUN: %+v", o)
	}
	if o := img("build", "-f", filepath.Join(ctx, "Dockerfile.bad"), ctx); o.code == 0 || !strings.Contains(o.stderr, "Dockerfile line 2: EXPOSE is not supported") {
		t.Errorf("an instruction not taken: %+v", o)
	}
	if o := img("build", "--build-arg", "NOPE", ctx); o.code != 125 || !strings.Contains(o.stderr, `invalid value "NOPE" for flag -build-arg: want K=V`) {
		t.Errorf("a build argument without =: %+v", o)
	}
}
