// Package pull brings an image from an OCI registry into the image
// store: the manifest for this platform, then each layer not already
// stored, into a layout in the store's temporary space, which the store
// imports with its own confined unpacker. Content the store holds already
// is not fetched again: the image's config digest is its digest there.
//
// The registry is untrusted: every answer it gives is bounded (documents
// at MaxDocument, layers at their declared size, at most MaxLayers of
// them, summed under the pull's bound), so that it can exhaust neither
// the host's memory nor the store's disk.
package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/imageref"
)

// Options modify a pull.
type Options struct {
	// Name names the image in the store; default: the reference as given
	// (docker.io/library/ left out).
	Name string
	// Username and Password, when set, are the registry's credentials
	// (basic auth, or traded for a token as the registry asks).
	Username, Password string
	// Insecure lets the registry be reached over plain HTTP when it does
	// not answer HTTPS, wherever it is (loopback and private addresses
	// get that without it).
	Insecure bool
	// Progress, when set, gets a line per step and per layer.
	Progress io.Writer
	// MaxBytes bounds what the pull downloads: its layers, compressed
	// (images.max_pull). 0 takes the smaller of twice the store's unpack
	// bound plus 1 GiB and half the free space of the store's file
	// system.
	MaxBytes int64
}

// Pulled is a pull's outcome.
type Pulled struct {
	*image.Imported
	// Fetched is what was downloaded, in bytes (compressed).
	Fetched int64
}

// Pull fetches ref ("registry/repo:tag" or "...@sha256:...") into st.
func Pull(ctx context.Context, st *image.Store, ref string, o Options) (*Pulled, error) {
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", image.ErrInvalid, err)
	}
	n := o.Name
	if n == "" {
		n = strings.TrimPrefix(ref, "docker.io/library/")
		if imageref.CheckName(n) != nil {
			n = strings.TrimPrefix(r.Name(), "index.docker.io/library/")
		}
	}
	if err := imageref.CheckName(n); err != nil {
		return nil, err
	}
	auth := authn.Anonymous
	if o.Username != "" || o.Password != "" {
		auth = &authn.Basic{Username: o.Username, Password: o.Password}
	}
	say := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", a...)
		}
	}
	if o.Insecure {
		say("%s may answer over plain HTTP (insecure)", r.Context().RegistryStr())
	}
	say("resolving %s", r.Name())
	// Every answer of the registry is bounded (see bounds); Pull reports
	// a breach as itself, whatever the registry client made of it.
	b := newBounds(remote.DefaultTransport)
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithUserAgent("airlock"), remote.WithTransport(b)}
	fail := func(err error) error {
		if berr := b.err(); berr != nil {
			err = berr
		}
		return fmt.Errorf("%s: %w", r.Name(), err)
	}
	img, err := resolve(r, ropts)
	if err != nil {
		return nil, fail(err)
	}
	// The manifest names the config's digest, the image's digest in the
	// store: content already there is not fetched, not even its config.
	m, err := img.Manifest()
	if err != nil {
		return nil, fail(err)
	}
	if err := checkConfig(m.Config); err != nil {
		return nil, fail(err)
	}
	digest := m.Config.Digest.String()
	if have, err := st.Resolve(digest); err == nil {
		if err := st.Tag(n, digest); err != nil {
			return nil, err
		}
		say("%s is in the store already; nothing fetched", digest)
		return &Pulled{Imported: &image.Imported{Image: have, Name: n, Existed: true}}, nil
	} else if !errors.Is(err, image.ErrNotFound) {
		return nil, err
	}
	// What the layers declare is bounded before any is fetched; each is
	// then read to its declared size at most (and checked against its
	// digest), and the registry sending more fails the pull.
	max, why, err := maxBytes(st, o.MaxBytes)
	if err != nil {
		return nil, err
	}
	sizes := make([]int64, len(m.Layers))
	for i, l := range m.Layers {
		sizes[i] = l.Size
		// A foreign layer's URLs would have this host fetch wherever
		// the registry says; such layers are Windows', never pulled.
		if len(l.URLs) > 0 {
			return nil, fail(errdefs.Errorf(errdefs.ErrInvalid, "layer %s is a foreign layer (fetched from URLs the manifest gives), which is not pulled", l.Digest))
		}
	}
	if err := checkLayers(sizes, max, why); err != nil {
		return nil, fail(err)
	}
	for _, l := range m.Layers {
		b.allowLayer(l.Digest.String(), l.Size)
	}
	dir, done, err := st.TempDir()
	if err != nil {
		return nil, err
	}
	defer done()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fail(err)
	}
	var fetched int64
	for i, l := range layers {
		h, err := l.Digest()
		if err != nil {
			return nil, err
		}
		size := m.Layers[i].Size
		say("layer %d/%d %s (%d bytes)", i+1, len(layers), h, size)
		rc, err := l.Compressed()
		if err != nil {
			return nil, fail(fmt.Errorf("layer %s: %w", h, err))
		}
		cr := &counter{r: io.LimitReader(rc, size+1)}
		if o.Progress != nil {
			cr.every, cr.last = progressEvery, time.Now()
			cr.report = func(n int64) { say("layer %d/%d: %s of %s", i+1, len(layers), sizeOf(n), sizeOf(size)) }
		}
		err = p.WriteBlob(h, io.NopCloser(cr))
		rc.Close()
		fetched += cr.n
		if err != nil {
			return nil, fail(fmt.Errorf("layer %s: %w", h, err))
		}
		if cr.n > size {
			return nil, fail(fmt.Errorf("%w: layer %s is larger than its manifest says", ErrLimit, h))
		}
	}
	if err := p.AppendImage(img); err != nil {
		return nil, fail(err)
	}
	say("fetched %d bytes; unpacking", fetched)
	imp, err := st.Import(ctx, dir, image.ImportOptions{Name: n})
	if err != nil {
		return nil, err
	}
	return &Pulled{Imported: imp, Fetched: fetched}, nil
}

// progressEvery is how often a layer being fetched reports how far it is
// (a variable for tests).
var progressEvery = 2 * time.Second

// counter counts what is read through it and, when report is set, says
// how much every so often.
type counter struct {
	r      io.Reader
	n      int64
	every  time.Duration
	last   time.Time
	report func(n int64)
}

func (c *counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.report != nil && n > 0 && time.Since(c.last) >= c.every {
		c.last = time.Now()
		c.report(c.n)
	}
	return n, err
}

// sizeOf renders a byte count for progress lines: "512 B", "3.5 MiB".
func sizeOf(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
