package config

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/sandbox"
)

var imagesKeys = []string{"max_entries", "max_size", "store"}

// Images configures the image store.
type Images struct {
	// Store is the store's directory.
	Store string
	// MaxSize and MaxEntries cap what one import may unpack; 0 takes the
	// store's defaults (16GiB, 1048576).
	MaxSize    int64
	MaxEntries int
}

func defaultImages() Images { return Images{Store: image.DefaultDir} }

func (p *parser) images(n *yaml.Node, c *Config) error {
	const at = "images"
	fs, err := p.fields(n, at, "a mapping of image store settings", imagesKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "store":
			c.Images.Store, err = p.absPath(f.val, sub)
		case "max_size":
			c.Images.MaxSize, err = p.positiveSize(f.val, sub)
		case "max_entries":
			var v int64
			v, err = p.integer(f.val, sub, 1, 1<<31-1)
			c.Images.MaxEntries = int(v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// user parses a tool's user: "UID" or "UID:GID", numbers inside the
// sandbox's ids 0-65535.
func (p *parser) user(n *yaml.Node, at string) (*sbspec.User, error) {
	s, err := p.str(n, at)
	if err != nil {
		return nil, err
	}
	u, g, hasG := strings.Cut(s, ":")
	if !hasG {
		g = u
	}
	uid, err1 := strconv.ParseUint(u, 10, 16)
	gid, err2 := strconv.ParseUint(g, 10, 16)
	if err1 != nil || err2 != nil {
		return nil, p.errAt(n, at, "%s: want UID or UID:GID, numbers from 0 to 65535", quote(s))
	}
	return &sbspec.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// rootfs parses a tool's rootfs: read-only (the default) or writable.
func (p *parser) rootfs(n *yaml.Node, at string) (bool, error) {
	s, err := p.str(n, at)
	if err != nil {
		return false, err
	}
	switch s {
	case "read-only":
		return false, nil
	case "writable":
		return true, nil
	}
	return false, p.errAt(n, at, "%s: want \"read-only\" or \"writable\"", quote(s))
}

// StoreOptions are the image store's options from the file.
func (im Images) StoreOptions() image.Options {
	return image.Options{Dir: im.Store, Limits: unpack.Limits{Bytes: im.MaxSize, Entries: im.MaxEntries}}
}

// ImageRun is what a tool's sandboxes get from its image.
type ImageRun struct {
	Image *sandbox.Image
	// User is the tool's user, else the image's; nil is the default.
	User *sandbox.User
	// Env is the image's environment, then the tool's.
	Env []string
	// Workdir is the tool's, else the image's, else DefaultWorkdir.
	Workdir string
}

// WithImage combines the tool's settings with img's defaults.
func (t *Tool) WithImage(img *image.Image) ImageRun {
	si, u := img.SandboxImage()
	si.Writable = t.WritableRoot
	if t.User != nil {
		u = (*sandbox.User)(t.User)
	}
	wd := ""
	if t.WorkdirSet {
		wd = t.Workdir
	}
	env, wd := img.Defaults(t.Env, wd)
	if wd == "" {
		wd = DefaultWorkdir
	}
	return ImageRun{Image: si, User: u, Env: env, Workdir: wd}
}
