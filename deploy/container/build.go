// Package container builds the image deploy/kubernetes runs, as an OCI
// image layout, without a container engine: the Containerfile beside this
// file says what the image is, and Build makes the same image from a
// Debian root file system (scripts/container-image makes it with
// mmdebstrap, as debian:bookworm-slim is made) and the three programs,
// built without cgo. The same inputs give the same bytes: every time in
// it is the inputs' epoch, and every file's order, owner and mode is fixed.
package container

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Spec is what the Containerfile's final stage says of the image.
type Spec struct {
	// Entrypoint and Cmd are its ENTRYPOINT and CMD (JSON form).
	Entrypoint, Cmd []string
	// Programs are the files its COPY --from=build puts in Dest.
	Programs []string
	Dest     string
	// Packages are what its RUN apt-get install adds to the base.
	Packages []string
}

// ParseContainerfile reads the final stage of the Containerfile: the
// lines after its last FROM.
func ParseContainerfile(r io.Reader) (Spec, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cont += s + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "FROM ") {
			lines = lines[:0]
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		return Spec{}, err
	}
	var s Spec
	for _, line := range lines {
		inst, args, _ := strings.Cut(line, " ")
		args = strings.TrimSpace(args)
		switch strings.ToUpper(inst) {
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(args), &v); err != nil {
				return s, fmt.Errorf("%s %s: want the JSON form: %w", inst, args, err)
			}
			if inst == "CMD" {
				s.Cmd = v
			} else {
				s.Entrypoint = v
			}
		case "COPY":
			f := strings.Fields(args)
			if len(f) < 3 || !strings.HasPrefix(f[0], "--from=") {
				return s, fmt.Errorf("COPY %s: want COPY --from=STAGE FILE... DEST", args)
			}
			for _, p := range f[1 : len(f)-1] {
				s.Programs = append(s.Programs, path.Base(p))
			}
			s.Dest = f[len(f)-1]
		case "RUN":
			for cmd := range strings.SplitSeq(args, "&&") {
				f := strings.Fields(cmd)
				if i := slices.Index(f, "install"); len(f) > 0 && f[0] == "apt-get" && i > 0 {
					for _, a := range f[i+1:] {
						if !strings.HasPrefix(a, "-") {
							s.Packages = append(s.Packages, a)
						}
					}
				}
			}
		}
	}
	if len(s.Programs) == 0 || s.Dest == "" || len(s.Entrypoint) == 0 {
		return s, errors.New("the Containerfile's final stage has no COPY --from of the programs or no ENTRYPOINT")
	}
	return s, nil
}

// Options are Build's inputs.
type Options struct {
	// Spec is the Containerfile's.
	Spec Spec
	// Base is a tar of the root file system the image starts from.
	Base string
	// Bin is the directory holding Spec.Programs.
	Bin string
	// Name is the image's name (airlock:TAG), in the layout's index.
	Name string
	// Epoch is every time in the image: files' mtimes (clamped to it)
	// and the config's creation time.
	Epoch time.Time
}

// OCI media types and annotations.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annoRefName   = "org.opencontainers.image.ref.name"
	// annoContainerd names the image for ctr images import.
	annoContainerd = "io.containerd.image.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Build writes the image as an OCI image layout in a tar to w, and
// returns its manifest's digest.
func Build(w io.Writer, o Options) (string, error) {
	out := newLayout(w, o.Epoch)
	base, err := os.Open(o.Base)
	if err != nil {
		return "", err
	}
	defer base.Close()
	baseLayer, baseDiff, err := layer(func(tw *tar.Writer) error { return copyBase(tw, tar.NewReader(base), o.Epoch) })
	if err != nil {
		return "", fmt.Errorf("base %s: %w", o.Base, err)
	}
	progLayer, progDiff, err := layer(func(tw *tar.Writer) error { return programs(tw, o) })
	if err != nil {
		return "", err
	}
	created := o.Epoch.UTC().Format(time.RFC3339)
	config := map[string]any{
		"created":      created,
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": o.Spec.Entrypoint,
			"Cmd":        o.Spec.Cmd,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{baseDiff, progDiff}},
		"history": []map[string]any{
			{"created": created, "created_by": "the base root file system, with " + strings.Join(append([]string{"nothing"}, o.Spec.Packages...)[min(1, len(o.Spec.Packages)):], " ")},
			{"created": created, "created_by": "COPY " + strings.Join(o.Spec.Programs, " ") + " " + o.Spec.Dest},
		},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return "", err
	}
	var layers []descriptor
	for _, l := range [][]byte{baseLayer, progLayer} {
		d, err := out.blob(mediaLayer, l)
		if err != nil {
			return "", err
		}
		layers = append(layers, d)
	}
	configDesc, err := out.blob(mediaConfig, configJSON)
	if err != nil {
		return "", err
	}
	manifest, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaManifest, "config": configDesc, "layers": layers})
	if err != nil {
		return "", err
	}
	md, err := out.blob(mediaManifest, manifest)
	if err != nil {
		return "", err
	}
	ref := o.Name
	if _, tag, ok := strings.Cut(o.Name, ":"); ok {
		ref = tag
	}
	md.Annotations = map[string]string{annoRefName: ref, annoContainerd: fullName(o.Name)}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []descriptor{md}})
	if err != nil {
		return "", err
	}
	if err := out.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return "", err
	}
	if err := out.file("index.json", index); err != nil {
		return "", err
	}
	return md.Digest, out.tw.Close()
}

// fullName is name as a container runtime spells it: a name without a
// registry is Docker Hub's library.
func fullName(name string) string {
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + name
	}
	return name
}

// layout writes an OCI image layout's files into a tar.
type layout struct {
	tw    *tar.Writer
	epoch time.Time
	dirs  map[string]bool
}

func newLayout(w io.Writer, epoch time.Time) *layout {
	return &layout{tw: tar.NewWriter(w), epoch: epoch, dirs: map[string]bool{}}
}

func (l *layout) file(name string, b []byte) error {
	var parents []string
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		parents = append([]string{d}, parents...)
	}
	for _, d := range parents {
		if l.dirs[d] {
			continue
		}
		l.dirs[d] = true
		if err := l.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: l.epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if err := l.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: l.epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := l.tw.Write(b)
	return err
}

func (l *layout) blob(media string, b []byte) (descriptor, error) {
	sum := sha256.Sum256(b)
	d := descriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
	return d, l.file("blobs/sha256/"+hex.EncodeToString(sum[:]), b)
}

// layer makes a gzip-compressed layer with fill, and returns it with the
// digest of its uncompressed tar (the config's diff_id).
func layer(fill func(*tar.Writer) error) ([]byte, string, error) {
	var buf bytes.Buffer
	// No name or time in the gzip header: the same tar, the same bytes.
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, "", err
	}
	diff := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, diff))
	if err := fill(tw); err != nil {
		return nil, "", err
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := gz.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), digest(diff), nil
}

func digest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// copyBase copies the base's entries in their order, times clamped to
// epoch, owners by number only, and without the names of the tools that
// made it (PAX records of atime and ctime).
func copyBase(tw *tar.Writer, tr *tar.Reader, epoch time.Time) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" {
			continue // the root itself
		}
		if h.Typeflag == tar.TypeDir {
			name += "/"
		}
		out := &tar.Header{Typeflag: h.Typeflag, Name: name, Linkname: h.Linkname, Mode: h.Mode, Uid: h.Uid, Gid: h.Gid,
			Size: h.Size, ModTime: h.ModTime, Devmajor: h.Devmajor, Devminor: h.Devminor, Format: tar.FormatPAX}
		if h.Typeflag == tar.TypeLink {
			out.Linkname = strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")
		}
		if out.ModTime.After(epoch) {
			out.ModTime = epoch
		}
		// File capabilities (ping's cap_net_raw) are part of the file.
		for k, v := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr.security.capability") {
				if out.PAXRecords == nil {
					out.PAXRecords = map[string]string{}
				}
				out.PAXRecords[k] = v
			}
		}
		if err := tw.WriteHeader(out); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
}

// programs is the COPY layer: Spec.Dest and its parents, and the
// programs in it, root's, mode 0755.
func programs(tw *tar.Writer, o Options) error {
	dest := strings.Trim(path.Clean("/"+o.Spec.Dest), "/")
	var dirs []string
	for d := dest; d != "." && d != ""; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: o.Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, p := range o.Spec.Programs {
		b, err := os.ReadFile(filepath.Join(o.Bin, p))
		if err != nil {
			return err
		}
		name := p
		if dest != "" {
			name = dest + "/" + p
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(b)), ModTime: o.Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return nil
}
