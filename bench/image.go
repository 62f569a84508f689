package main

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Where the image section keeps its files. All of them are removed when
// it ends; whatever an interrupted run left is removed when the next
// starts.
const (
	// imageWork holds the static binary and the root file system of the
	// start-latency image.
	imageWork = "/var/tmp/airlock-bench-image"
	// imageStore is the store that image is imported into.
	imageStore = "/var/lib/airlock-bench/images"
	// importWork holds the generated image of the import timings, as a
	// directory and as a tarball.
	importWork = "/var/tmp/airlock-bench-import"
	// importStore is the store imports are timed into, emptied before
	// each.
	importStore = "/var/lib/airlock-bench/import"
	// benchTrue is where every start-latency sandbox has the static
	// binary bound.
	benchTrue = "/opt/airlock-bench/true"
)

type imageArgs struct {
	// n is the number of timed start-latency runs per case.
	n int
	// importMB is the size of the generated image's large files, in MiB.
	importMB int
}

// imageBench times sandboxes started from an imported image against ones
// started from the host image, and image imports.
func imageBench(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, a imageArgs) error {
	fmt.Printf("\n## Images\n")
	if err := imageStart(ctx, rt, lim, a.n); err != nil {
		return err
	}
	return imageImport(ctx, a.importMB)
}

// imageStart times create → run → destroy from the host image and from an
// imported one, interleaved, the order rotating every iteration. The
// imported image holds one static binary at /bin/true; every sandbox, of
// either root, has the same binary bound at benchTrue, so the specs differ
// in their root alone and the image can be compared with the host running
// the very same bytes. The host's own /bin/true is timed too, for scale.
func imageStart(ctx context.Context, rt *sandbox.Runtime, lim sandbox.Limits, n int) error {
	if err := freshDir(imageWork); err != nil {
		return err
	}
	defer os.RemoveAll(imageWork)
	bin := filepath.Join(imageWork, "true")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./bench/internal/truebin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build truebin: %v: %s", err, out)
	}
	root := filepath.Join(imageWork, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		return err
	}
	if err := copyFile(bin, filepath.Join(root, "bin", "true")); err != nil {
		return err
	}
	if err := os.RemoveAll(imageStore); err != nil {
		return err
	}
	defer removeStore(imageStore)
	st, err := image.Open(image.Options{Dir: imageStore})
	if err != nil {
		return err
	}
	imp, err := st.Import(ctx, root, image.ImportOptions{Name: "bench-true"})
	if err != nil {
		return fmt.Errorf("import %s: %w", root, err)
	}
	img := &sandbox.Image{Root: imp.Root, Lock: imp.Lock}
	mounts := []sandbox.Mount{{Source: bin, Target: benchTrue}}
	cases := []struct {
		name string
		spec sandbox.Spec
		argv []string
	}{
		{"host image, the host's `/bin/true` (dynamically linked)", sandbox.Spec{Limits: lim, Mounts: mounts}, []string{"/bin/true"}},
		{"host image, static `true` (bound at `" + benchTrue + "`)", sandbox.Spec{Limits: lim, Mounts: mounts}, []string{benchTrue}},
		{"imported image, the same static `true` (the image's `/bin/true`)", sandbox.Spec{Limits: lim, Mounts: mounts, Image: img}, []string{"/bin/true"}},
	}
	one := func(spec sandbox.Spec, argv []string) (time.Duration, error) {
		start := time.Now()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			return 0, err
		}
		r := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv})
		if err := sb.Destroy(ctx); err != nil {
			return 0, err
		}
		if r.Outcome != result.Exited || r.ExitCode != 0 {
			return 0, fmt.Errorf("run: %s %d %s", r.Outcome, r.ExitCode, r.Error)
		}
		return time.Since(start), nil
	}
	if err := checkImageRoot(ctx, rt, cases[2].spec); err != nil {
		return err
	}
	res := make([]*series, len(cases))
	for i, c := range cases {
		res[i] = &series{name: c.name}
	}
	// The first tenth warms up (page cache, the runtime's cached image
	// user namespaces) and is not counted.
	warm := n / 10
	for i := range warm + n {
		for j := range cases {
			k := (i + j) % len(cases)
			d, err := one(cases[k].spec, cases[k].argv)
			if err != nil {
				return fmt.Errorf("%s: %w", cases[k].name, err)
			}
			if i >= warm {
				res[k].d = append(res[k].d, d)
			}
		}
	}
	host := res[1]
	fmt.Printf("\n### Start from an imported image (%d runs each, interleaved, in process)\n\n", n)
	fmt.Printf("Create → run → destroy. Every sandbox has the same static binary bound at `%s`, so the specs differ only in their root.\n\n", benchTrue)
	fmt.Println("| root and command | p50 | p99 | p50 / host, same binary |\n| --- | --- | --- | --- |")
	for _, s := range res {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(host.pct(0.5)))
	}
	im := res[2]
	fmt.Printf("\nImported image vs host image, same binary: **p50 %.2f×, p99 %.2f×** (target: within 10 %%).\n",
		float64(im.pct(0.5))/float64(host.pct(0.5)), float64(im.pct(0.99))/float64(host.pct(0.99)))
	return nil
}

// checkImageRoot makes sure a sandbox of spec runs on the imported image,
// not the host's directories, before it is timed as such: the image has
// no /bin/sh, the host does.
func checkImageRoot(ctx context.Context, rt *sandbox.Runtime, spec sandbox.Spec) error {
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("imported image: %w", err)
	}
	r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "true"}})
	if err := sb.Destroy(ctx); err != nil {
		return err
	}
	if r.Outcome == result.Exited && r.ExitCode == 0 {
		return fmt.Errorf("a sandbox of the imported image ran /bin/sh: its root is not the image")
	}
	return nil
}

// imageImport times imports of a generated root file system of about mb
// MiB, as a directory and as an uncompressed tarball, each into an empty
// store, three runs each, interleaved; then a second import of the same
// source into the same store, which finds the content already stored.
// Caches are warm: the source was just written and stays in the page
// cache; the disk is synced before each timed step so that no earlier
// writeback runs during it.
func imageImport(ctx context.Context, mb int) error {
	if err := freshDir(importWork); err != nil {
		return err
	}
	defer os.RemoveAll(importWork)
	if err := os.RemoveAll(importStore); err != nil {
		return err
	}
	defer removeStore(importStore)
	dir := filepath.Join(importWork, "rootfs")
	files, err := genRootfs(dir, mb)
	if err != nil {
		return fmt.Errorf("generate image: %w", err)
	}
	tarball := filepath.Join(importWork, "rootfs.tar")
	if err := writeTar(dir, tarball); err != nil {
		return fmt.Errorf("write tarball: %w", err)
	}
	srcs := []struct{ name, path string }{{"directory", dir}, {"tarball (uncompressed)", tarball}}
	type timings struct{ first, again series }
	res := make([]timings, len(srcs))
	var rep struct {
		entries int
		bytes   int64
	}
	for range 3 {
		for i, s := range srcs {
			first, again, imp, err := timeImport(ctx, s.path)
			if err != nil {
				return fmt.Errorf("import %s: %w", s.name, err)
			}
			res[i].first.d = append(res[i].first.d, first)
			res[i].again.d = append(res[i].again.d, again)
			rep.entries, rep.bytes = imp.Unpacked.Entries, imp.Unpacked.Bytes
		}
	}
	mib := float64(rep.bytes) / (1 << 20)
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f MiB/s", mib/d.Seconds()) }
	fmt.Printf("\n### Import (median of 3 runs each, interleaved, each into an empty store)\n\n")
	fmt.Printf("A generated root file system: %d entries (%d files), %.0f MiB of file content. ", rep.entries, files, mib)
	fmt.Printf("An import returns once the unpacked files are on disk (it syncs the store's file system before naming the image). ")
	fmt.Printf("The second import is of the same source into the same store, which already holds it.\n\n")
	fmt.Println("| source | import, durable | throughput | second import (already stored) |\n| --- | --- | --- | --- |")
	for i, s := range srcs {
		r := &res[i]
		f, a := r.first.pct(0.5), r.again.pct(0.5)
		fmt.Printf("| %s | %s | %s | %s |\n", s.name, sec(f), rate(f), sec(a))
	}
	return nil
}

// timeImport imports src into an empty store and again into the same
// store, timing both.
func timeImport(ctx context.Context, src string) (first, again time.Duration, imp *image.Imported, err error) {
	if err := os.RemoveAll(importStore); err != nil {
		return 0, 0, nil, err
	}
	st, err := image.Open(image.Options{Dir: importStore})
	if err != nil {
		return 0, 0, nil, err
	}
	// No earlier writeback runs during the timed import.
	unix.Sync()
	start := time.Now()
	imp, err = st.Import(ctx, src, image.ImportOptions{Name: "bench-import"})
	if err != nil {
		return 0, 0, nil, err
	}
	first = time.Since(start)
	if imp.Existed {
		return 0, 0, nil, fmt.Errorf("an empty store already held %s", imp.Digest)
	}
	start = time.Now()
	imp2, err := st.Import(ctx, src, image.ImportOptions{Name: "bench-import"})
	if err != nil {
		return 0, 0, nil, err
	}
	again = time.Since(start)
	if !imp2.Existed || imp2.Digest != imp.Digest {
		return 0, 0, nil, fmt.Errorf("second import: existed %v, digest %s, want the first's %s", imp2.Existed, imp2.Digest, imp.Digest)
	}
	return first, again, imp, nil
}

// genRootfs writes a root file system of mb MiB in 256 KiB files, 50 to a
// directory, plus half as many small files (0.5–4 KiB) and a symlink per
// directory. The bytes are pseudo-random (cut from one random buffer, each
// file stamped with its number) so that nothing could shortcut them. It
// returns how many regular files it wrote.
func genRootfs(dir string, mb int) (int, error) {
	const big = 256 << 10
	buf := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{'a', 'i', 'r', 'l', 'o', 'c', 'k'}).Read(buf)
	chunk := make([]byte, big)
	nBig := mb * (1 << 20) / big
	nSmall := nBig / 2
	write := func(sub string, i, size int) error {
		d := filepath.Join(dir, sub, fmt.Sprintf("d%03d", i/50))
		if i%50 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(fmt.Sprintf("f%04d", i), filepath.Join(d, "first")); err != nil {
				return err
			}
		}
		off := (i * 4099 * 64) % (len(buf) - big)
		copy(chunk, buf[off:off+size])
		binary.LittleEndian.PutUint64(chunk, uint64(i))
		return os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), chunk[:size], 0o644)
	}
	for i := range nBig {
		if err := write("usr/share/bench", i, big); err != nil {
			return 0, err
		}
	}
	for i := range nSmall {
		if err := write("etc/bench", i, 512+(i*997)%(4<<10-512)); err != nil {
			return 0, err
		}
	}
	return nBig + nSmall, nil
}

// writeTar writes the tree at dir as an uncompressed tarball.
func writeTar(dir, dst string) (err error) {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// freshDir empties dir (what an interrupted run left) and creates it
// reachable by others: a sandbox's init binds sources with unprivileged
// ids.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// removeStore removes a store, and its parent when nothing else is there.
func removeStore(dir string) {
	os.RemoveAll(dir)
	os.Remove(filepath.Dir(dir))
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
