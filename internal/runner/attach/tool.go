package attach

import (
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/sandbox"
)

// Limits are a tool's ceilings: its overrides over the defaults.
func Limits(l config.Limits) sandbox.Limits {
	return sandbox.Limits(l.Apply(sbspec.DefaultLimits()))
}

// Mounts are a tool's read-only host mounts.
func Mounts(ms []sbspec.Mount) []sandbox.Mount {
	if ms == nil {
		return nil
	}
	out := make([]sandbox.Mount, len(ms))
	for i, m := range ms {
		out[i] = sandbox.Mount(m)
	}
	return out
}

// User is who a tool's commands run as; nil leaves it to the image or the
// runtime's default.
func User(u *sbspec.User) *sandbox.User { return (*sandbox.User)(u) }

// StoreOptions are the image store's options from the config file.
func StoreOptions(im config.Images) image.Options {
	return image.Options{Dir: im.Store, Limits: unpack.Limits{Bytes: im.MaxSize, Entries: im.MaxEntries}}
}

// ImageRun is what a tool's sandboxes get from its image.
type ImageRun struct {
	Image *sandbox.Image
	// User is the tool's user, else the image's; nil is the default.
	User *sandbox.User
	// Env is the image's environment, then the tool's.
	Env []string
	// Workdir is the tool's, else the image's, else config.DefaultWorkdir.
	Workdir string
}

// WithImage combines the tool's settings with img's defaults.
func WithImage(t *config.Tool, img *image.Image) ImageRun {
	si := &sandbox.Image{Root: img.Root, Lock: img.Lock, Writable: t.WritableRoot}
	var u *sandbox.User
	if img.Config.UID != nil && img.Config.GID != nil {
		u = &sandbox.User{UID: *img.Config.UID, GID: *img.Config.GID}
	}
	if t.User != nil {
		u = User(t.User)
	}
	wd := ""
	if t.WorkdirSet {
		wd = t.Workdir
	}
	env, wd := img.Defaults(t.Env, wd)
	if wd == "" {
		wd = config.DefaultWorkdir
	}
	return ImageRun{Image: si, User: u, Env: env, Workdir: wd}
}
