package attach

import (
	"reflect"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/sandbox"
)

// TestDefaultsAgree checks the values that config and the image store
// repeat, not linking the runtime, against the runtime's own.
func TestDefaultsAgree(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"config.DefaultWorkdir", config.DefaultWorkdir, sandbox.HomeDir},
		{"config.DefaultImageStore", config.DefaultImageStore, image.DefaultDir},
		{"config.ImageHost", config.ImageHost, image.Host},
		{"image.DefaultIDBase", uint32(image.DefaultIDBase), uint32(sandbox.DefaultImageIDBase)},
		{"image.DefaultIDBase+unpack.IDRange", uint32(image.DefaultIDBase + unpack.IDRange), uint32(sandbox.DefaultUIDBase)},
		{"Limits of no overrides", Limits(config.Limits{}), sandbox.DefaultLimits()},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestToolTranslations(t *testing.T) {
	mem, tm := int64(64<<20), time.Second
	want := sandbox.DefaultLimits()
	want.Memory, want.Time = mem, tm
	if got := Limits(config.Limits{Memory: &mem, Time: &tm}); got != want {
		t.Errorf("Limits = %+v, want %+v", got, want)
	}
	if got := Mounts(nil); got != nil {
		t.Errorf("Mounts(nil) = %v, want nil", got)
	}
	ms := []sbspec.Mount{{Source: "/a", Target: "/srv/a"}, {Source: "/b", Target: "/srv/b"}}
	if got, want := Mounts(ms), []sandbox.Mount{{Source: "/a", Target: "/srv/a"}, {Source: "/b", Target: "/srv/b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Mounts = %v, want %v", got, want)
	}
	if got := User(nil); got != nil {
		t.Errorf("User(nil) = %v, want nil", got)
	}
	if got := User(&sbspec.User{UID: 1, GID: 2}); *got != (sandbox.User{UID: 1, GID: 2}) {
		t.Errorf("User = %+v", got)
	}
	if got, want := StoreOptions(config.Images{Store: "/srv/images", MaxSize: 5, MaxEntries: 6}), (image.Options{Dir: "/srv/images", Limits: unpack.Limits{Bytes: 5, Entries: 6}}); got != want {
		t.Errorf("StoreOptions = %+v, want %+v", got, want)
	}
}

func TestWithImage(t *testing.T) {
	uid, gid := uint32(7), uint32(8)
	img := &image.Image{Root: "/store/root", Lock: "/store/lock", Config: image.Config{Env: []string{"A=image", "B=image"}, WorkingDir: "/app", UID: &uid, GID: &gid}}
	bare := &image.Image{Root: "/store/root", Lock: "/store/lock"}
	tests := []struct {
		name string
		tool config.Tool
		img  *image.Image
		want ImageRun
	}{
		{"image's defaults", config.Tool{Env: []string{"B=tool"}}, img, ImageRun{
			Image: &sandbox.Image{Root: "/store/root", Lock: "/store/lock"}, User: &sandbox.User{UID: 7, GID: 8},
			Env: []string{"A=image", "B=image", "B=tool"}, Workdir: "/app",
		}},
		{"tool's settings", config.Tool{Workdir: "/w", WorkdirSet: true, User: &sbspec.User{UID: 1, GID: 2}, WritableRoot: true}, img, ImageRun{
			Image: &sandbox.Image{Root: "/store/root", Lock: "/store/lock", Writable: true}, User: &sandbox.User{UID: 1, GID: 2},
			Env: []string{"A=image", "B=image"}, Workdir: "/w",
		}},
		{"a tool's workdir not given", config.Tool{Workdir: config.DefaultWorkdir}, bare, ImageRun{
			Image: &sandbox.Image{Root: "/store/root", Lock: "/store/lock"}, Env: []string{}, Workdir: config.DefaultWorkdir,
		}},
	}
	for _, tt := range tests {
		got := WithImage(&tt.tool, tt.img)
		if len(got.Env) == 0 {
			got.Env = []string{}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v %+v %+v, want %+v %+v %+v", tt.name, got, got.Image, got.User, tt.want, tt.want.Image, tt.want.User)
		}
	}
}
