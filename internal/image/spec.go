package image

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The parts of the OCI image specification (image-spec v1.1: index,
// manifest, config) and of docker save's manifest.json that an import
// reads. They are plain JSON and stable; declaring them here keeps a
// general image library (and the regular expressions and compressors its
// packages set up at start) out of every airlock program that merely
// links the store. The tests build their archives with
// go-containerregistry, so these are checked against another writer.

// Media types of the documents an index or a manifest may point to.
const (
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
)

// digest is a content digest as the documents write it. Only sha256 is
// accepted, in its canonical form (64 lowercase hex digits): it names
// files in an OCI layout, so nothing else may get through.
type digest string

func (d *digest) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return fmt.Errorf("unsupported digest %q (want sha256:<64 lowercase hex digits>)", s)
	}
	*d = digest(s)
	return nil
}

// hex is the digest's hexadecimal part.
func (d digest) hex() string { return strings.TrimPrefix(string(d), "sha256:") }

// descriptor points at a blob.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      digest            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

// indexManifest is an OCI index (index.json, or a nested index) or a
// docker manifest list.
type indexManifest struct {
	Manifests []descriptor `json:"manifests"`
}

// manifest is one image's manifest.
type manifest struct {
	Config descriptor   `json:"config"`
	Layers []descriptor `json:"layers"`
}

// configFile is an image's configuration: the platform, the digests of
// its uncompressed layers and the defaults of its processes.
type configFile struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	RootFS       struct {
		DiffIDs []digest `json:"diff_ids"`
	} `json:"rootfs"`
	Config struct {
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
	} `json:"config"`
}

// dockerImage is one entry of docker save's manifest.json: the paths of
// its config and layers in the archive.
type dockerImage struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// parseConfig decodes an image's configuration.
func parseConfig(data []byte) (*configFile, error) {
	c := new(configFile)
	if err := json.Unmarshal(data, c); err != nil {
		return nil, err
	}
	return c, nil
}
