package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
)

// Caps on the small JSON documents of an image archive.
const (
	maxDocument = 4 << 20
	maxNesting  = 4
)

// ociImage is one image chosen from an archive: its config and its layer
// blobs, in order.
type ociImage struct {
	format   string // "oci" or "docker"
	configID string // sha256:<hex> of the config: the image's digest
	config   *configFile
	layers   []layerRef
	// names the archive gives the image (tags, ref names).
	names []string
}

type layerRef struct {
	path string
	// digest, when known, is the blob's digest (OCI); the uncompressed
	// content is always checked against the config's diff_ids.
	digest string
}

func readDoc(b bundle, name string) ([]byte, error) {
	rc, err := b.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxDocument {
		return nil, fmt.Errorf("%s: over %d bytes", name, maxDocument)
	}
	return data, nil
}

func sha256Of(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blobPath is where an OCI layout keeps a blob.
func blobPath(h digest) (string, error) {
	if h == "" {
		return "", errors.New("a descriptor has no digest")
	}
	return "blobs/sha256/" + h.hex(), nil
}

// readBlob reads a small blob and checks its digest.
func readBlob(b bundle, h digest) ([]byte, error) {
	p, err := blobPath(h)
	if err != nil {
		return nil, err
	}
	data, err := readDoc(b, p)
	if err != nil {
		return nil, err
	}
	if got := sha256Of(data); got != string(h) {
		return nil, fmt.Errorf("blob %s has digest %s", h, got)
	}
	return data, nil
}

// selectImage picks the image to import from an archive: the one named
// want (a tag or reference name), or the only one; in an index of
// platforms, the host's.
func selectImage(b bundle, want string) (*ociImage, error) {
	if b.has("index.json") {
		return selectOCI(b, want)
	}
	return selectDocker(b, want)
}

func selectDocker(b bundle, want string) (*ociImage, error) {
	data, err := readDoc(b, "manifest.json")
	if err != nil {
		return nil, err
	}
	var m []dockerImage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(m) == 0 {
		return nil, errors.New("manifest.json lists no image")
	}
	var pick *dockerImage
	if len(m) == 1 {
		pick = &m[0]
	} else {
		var all []string
		for i := range m {
			all = append(all, m[i].RepoTags...)
			if want != "" && slices.ContainsFunc(m[i].RepoTags, func(t string) bool { return sameRef(t, want) }) {
				pick = &m[i]
			}
		}
		if pick == nil {
			return nil, choose(want, all)
		}
	}
	cfgData, err := readDoc(b, pick.Config)
	if err != nil {
		return nil, err
	}
	img := &ociImage{format: "docker", configID: sha256Of(cfgData), names: pick.RepoTags}
	if img.config, err = parseConfig(cfgData); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	for _, l := range pick.Layers {
		img.layers = append(img.layers, layerRef{path: l})
	}
	return img, nil
}

// choose explains a missing or ambiguous selection.
func choose(want string, all []string) error {
	list := "none are named"
	if len(all) > 0 {
		list = "it has " + strings.Join(all, ", ")
	}
	if want == "" {
		return fmt.Errorf("%w: the archive holds several images; choose one with --name (%s)", ErrInvalid, list)
	}
	return fmt.Errorf("%w: the archive has no image %q (%s)", ErrInvalid, want, list)
}

// sameRef matches a tag or reference name against what the user typed:
// exactly, or without the default registry and library prefix.
func sameRef(have, want string) bool {
	if have == want {
		return true
	}
	for _, p := range []string{"docker.io/library/", "docker.io/", "index.docker.io/library/"} {
		if strings.TrimPrefix(have, p) == want {
			return true
		}
	}
	return false
}

const refNameAnnotation = "org.opencontainers.image.ref.name"

func selectOCI(b bundle, want string) (*ociImage, error) {
	data, err := readDoc(b, "index.json")
	if err != nil {
		return nil, err
	}
	var idx indexManifest
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	desc, err := pickDescriptor(idx.Manifests, want)
	if err != nil {
		return nil, err
	}
	name := desc.Annotations[refNameAnnotation]
	for depth := 0; ; depth++ {
		if depth > maxNesting {
			return nil, fmt.Errorf("indexes nested more than %d deep", maxNesting)
		}
		data, err := readBlob(b, desc.Digest)
		if err != nil {
			return nil, err
		}
		switch desc.MediaType {
		case mediaOCIIndex, mediaDockerList:
			var idx indexManifest
			if err := json.Unmarshal(data, &idx); err != nil {
				return nil, fmt.Errorf("index %s: %w", desc.Digest, err)
			}
			d, err := hostPlatform(idx.Manifests)
			if err != nil {
				return nil, err
			}
			desc = d
			continue
		case mediaOCIManifest, mediaDockerManifest, "":
		default:
			return nil, fmt.Errorf("unsupported manifest type %q", desc.MediaType)
		}
		var m manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
		}
		cfgData, err := readBlob(b, m.Config.Digest)
		if err != nil {
			return nil, fmt.Errorf("image config: %w", err)
		}
		img := &ociImage{format: "oci", configID: string(m.Config.Digest)}
		if name != "" {
			img.names = []string{name}
		}
		if img.config, err = parseConfig(cfgData); err != nil {
			return nil, fmt.Errorf("image config: %w", err)
		}
		for _, l := range m.Layers {
			p, err := blobPath(l.Digest)
			if err != nil {
				return nil, err
			}
			if !b.has(p) {
				return nil, fmt.Errorf("layer %s is not in the archive (a foreign layer?)", l.Digest)
			}
			img.layers = append(img.layers, layerRef{path: p, digest: string(l.Digest)})
		}
		return img, nil
	}
}

// pickDescriptor chooses among an index's entries: by reference name, or
// the only one, or (all being platforms of one image) the host's.
func pickDescriptor(ds []descriptor, want string) (descriptor, error) {
	if len(ds) == 0 {
		return descriptor{}, errors.New("index.json lists no image")
	}
	var names []string
	var named []descriptor
	for _, d := range ds {
		n := d.Annotations[refNameAnnotation]
		if n != "" {
			names = append(names, n)
		}
		if want != "" && n != "" && (sameRef(n, want) || strings.HasSuffix(want, ":"+n)) {
			named = append(named, d)
		}
	}
	switch {
	case len(named) > 0:
		ds = named
	case len(ds) == 1:
		return ds[0], nil
	case want != "" && len(names) > 0 || len(slices.Compact(slices.Sorted(slices.Values(names)))) > 1:
		return descriptor{}, choose(want, names)
	}
	if len(ds) == 1 {
		return ds[0], nil
	}
	return hostPlatform(ds)
}

// hostPlatform picks the manifest for this host's platform.
func hostPlatform(ds []descriptor) (descriptor, error) {
	host := platform{OS: "linux", Architecture: runtime.GOARCH}
	var have []string
	for _, d := range ds {
		if d.Platform == nil {
			continue
		}
		if d.Platform.OS == host.OS && d.Platform.Architecture == host.Architecture {
			return d, nil
		}
		have = append(have, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	return descriptor{}, fmt.Errorf("%w: no image for this host's platform linux/%s (the archive has %s)", ErrInvalid, runtime.GOARCH, strings.Join(have, ", "))
}

// checkPlatform refuses an image built for another architecture.
func checkPlatform(c *configFile) error {
	if c.OS != "" && c.OS != "linux" || c.Architecture != "" && c.Architecture != runtime.GOARCH {
		return fmt.Errorf("%w: the image is for %s/%s, this host is linux/%s", ErrInvalid, c.OS, c.Architecture, runtime.GOARCH)
	}
	return nil
}
