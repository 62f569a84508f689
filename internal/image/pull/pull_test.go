package pull

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/imagetest"
	"github.com/airlockhq/airlock/internal/testutil"
)

// TestPullFromRegistry pushes the test image to a real registry and
// pulls it into a store: without credentials it is refused; with them it
// is imported through the store's unpacker and runs as the store's other
// images do; pulled again (under another name) nothing is fetched.
func TestPullFromRegistry(t *testing.T) {
	testutil.RequireRoot(t)
	host, blobBytes := imagetest.Registry(t, "puller", "s3cret-pw")
	ref := host + "/tools/t:1"
	img := imagetest.Tool(t, runtime.GOARCH)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	auth := &authn.Basic{Username: "puller", Password: "s3cret-pw"}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		t.Fatal(err)
	}
	st := testStore(t)
	ctx := t.Context()
	if _, err := Pull(ctx, st, ref, Options{}); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("a pull without credentials: %v", err)
	}
	blobBytes.Store(0)
	var progress bytes.Buffer
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 0 // a line for every read
	p, err := Pull(ctx, st, ref, Options{Username: "puller", Password: "s3cret-pw", Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigName()
	if p.Existed || p.Name != ref || p.Digest != cfg.String() || p.Fetched == 0 || blobBytes.Load() < p.Fetched {
		t.Fatalf("pulled %+v (fetched %d, the registry served %d blob bytes)", p, p.Fetched, blobBytes.Load())
	}
	if !strings.Contains(progress.String(), "layer 1/2 sha256:") || !strings.Contains(progress.String(), "layer 2/2 ") || !regexp.MustCompile(`layer 2/2: \d+ B of \d+ B`).MatchString(progress.String()) {
		t.Errorf("progress:\n%s", progress.String())
	}
	got, err := st.Resolve(ref)
	if err != nil || got.Config.WorkingDir != "/srv" || got.Config.UID == nil || *got.Config.UID != 1234 {
		t.Fatalf("resolve %s: %+v %v", ref, got, err)
	}
	if b, err := os.ReadFile(filepath.Join(got.Root, "srv/data")); err != nil || string(b) != "layer two" {
		t.Fatalf("srv/data: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(got.Root, "etc/gone")); !os.IsNotExist(err) {
		t.Fatalf("the whiteout was not applied: %v", err)
	}
	// Again, under another name: the manifest is read, no layer fetched.
	blobBytes.Store(0)
	again, err := Pull(ctx, st, ref, Options{Name: "t:again", Username: "puller", Password: "s3cret-pw"})
	if err != nil || !again.Existed || again.Fetched != 0 || blobBytes.Load() != 0 {
		t.Fatalf("a second pull: %+v %v (the registry served %d blob bytes)", again, err, blobBytes.Load())
	}
	if named, err := st.Resolve("t:again"); err != nil || named.Digest != got.Digest {
		t.Fatalf("t:again: %+v %v", named, err)
	}
	// A reference that is not one, and one the registry does not have.
	if _, err := Pull(ctx, st, "UPPER/case::x", Options{}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("a bad reference: %v", err)
	}
	if _, err := Pull(ctx, st, host+"/tools/none:1", Options{Username: "puller", Password: "s3cret-pw"}); err == nil {
		t.Error("a missing image pulled")
	}
}

// TestPullInsecure: a registry on an address registry clients do not
// take for a local one is spoken to over HTTPS, so one that speaks plain
// HTTP is refused unless the pull allows it.
func TestPullInsecure(t *testing.T) {
	testutil.RequireRoot(t)
	host, blobBytes := imagetest.RegistryAt(t, "127.0.0.2:0", "puller", "pw-insecure")
	ref := host + "/tools/t:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.Tool(t, runtime.GOARCH)
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: "puller", Password: "pw-insecure"})); err != nil {
		t.Fatal(err)
	}
	st := testStore(t)
	o := Options{Username: "puller", Password: "pw-insecure"}
	if _, err := Pull(t.Context(), st, ref, o); err == nil || !strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		t.Fatalf("a pull over HTTPS from a plain HTTP registry: %v", err)
	}
	if n := blobBytes.Load(); n != 0 {
		t.Fatalf("the refused pull fetched %d blob bytes", n)
	}
	var progress bytes.Buffer
	o.Insecure, o.Progress = true, &progress
	p, err := Pull(t.Context(), st, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := img.ConfigName(); p.Existed || p.Digest != cfg.String() || p.Fetched == 0 || !strings.Contains(progress.String(), host+" may answer over plain HTTP") {
		t.Fatalf("pulled %+v; progress:\n%s", p, progress.String())
	}
}

// testStore opens an empty image store that goes when the test ends.
func testStore(t *testing.T) *image.Store {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "airlock-pull-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return storeAt(t, filepath.Join(dir, "store"))
}
