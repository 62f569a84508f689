package pull

import (
	"fmt"
	"math"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
)

// resolve finds the image r names for this host's platform, following
// indexes (at most maxNesting deep) itself rather than letting the
// registry client do it: each manifest an index points at is refused
// when it declares more than MaxDocument bytes, before it is fetched.
// Attestation manifests and other platforms' are never fetched.
func resolve(r name.Reference, opts []remote.Option) (v1.Image, error) {
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, err
	}
	for depth := 0; desc.MediaType.IsIndex(); depth++ {
		if depth >= maxNesting {
			return nil, fmt.Errorf("%w: indexes nested more than %d deep", ErrLimit, maxNesting)
		}
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		child, err := hostChild(im.Manifests)
		if err != nil {
			return nil, err
		}
		if child.Size < 0 || child.Size > MaxDocument {
			return nil, fmt.Errorf("%w: the index declares manifest %s of %d bytes; a manifest is read only when it declares at most %d", ErrLimit, child.Digest, child.Size, MaxDocument)
		}
		if desc, err = remote.Get(r.Context().Digest(child.Digest.String()), opts...); err != nil {
			return nil, err
		}
	}
	return desc.Image()
}

// hostChild picks the manifest for this host's platform in an index (one
// without a platform is linux/amd64, as registry clients take it).
func hostChild(ds []v1.Descriptor) (v1.Descriptor, error) {
	var have []string
	for _, d := range ds {
		p := v1.Platform{OS: "linux", Architecture: "amd64"}
		if d.Platform != nil {
			p = *d.Platform
		}
		if p.OS == "linux" && p.Architecture == runtime.GOARCH {
			return d, nil
		}
		have = append(have, p.OS+"/"+p.Architecture)
	}
	return v1.Descriptor{}, errdefs.Errorf(errdefs.ErrNotFound, "no image for this host's platform linux/%s (the index has %v)", runtime.GOARCH, have)
}

// checkConfig refuses a config that is not named by a sha256 digest, or
// that the manifest declares over
// MaxDocument, or without a size (-1, which would leave the read
// bounded by nothing the registry said), before it is fetched.
func checkConfig(d v1.Descriptor) error {
	// The config's digest is the image's name in the store: nothing but
	// a canonical sha256 may become one.
	if d.Digest.Algorithm != "sha256" || len(d.Digest.Hex) != 64 {
		return errdefs.Errorf(errdefs.ErrInvalid, "the manifest names no sha256 image config (%q)", d.Digest)
	}
	if d.Size < 0 {
		return errdefs.Errorf(errdefs.ErrInvalid, "the manifest declares image config %s with no size (%d)", d.Digest, d.Size)
	}
	if d.Size > MaxDocument {
		return fmt.Errorf("%w: the manifest declares image config %s of %d bytes; a config is read only when it declares at most %d", ErrLimit, d.Digest, d.Size, MaxDocument)
	}
	return nil
}

// maxBytes is the bound on what one pull downloads, and where it comes
// from (for the error that names it). Unless the operator set one, it is
// at most half the free space of the store's file system: a pull never
// fills the disk the store, and whatever shares its file system, lives on.
func maxBytes(st *image.Store, set int64) (int64, string, error) {
	if set > 0 {
		return set, "images.max_pull", nil
	}
	max, why := int64(math.MaxInt64), "twice images.max_size and 1 GiB"
	if u := st.Limits().Bytes; u < (math.MaxInt64-1<<30)/2 {
		max = u*2 + 1<<30
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(st.Dir(), &fs); err != nil {
		return 0, "", fmt.Errorf("image store: %w", err)
	}
	free := fs.Bavail * uint64(fs.Bsize)
	if half := free / 2; half < uint64(max) {
		max, why = int64(half), fmt.Sprintf("half the %d bytes free on the image store's file system; images.max_pull sets another bound", free)
	}
	return max, why, nil
}
