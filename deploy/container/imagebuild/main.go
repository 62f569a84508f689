// Command imagebuild builds the image of deploy/container/Containerfile as
// an OCI image layout in a tar, without a container engine (package
// container; scripts/container-image runs it):
//
//	go run ./deploy/container/imagebuild -base ROOT.tar -bin DIR -name airlock:TAG -o OUT.tar
//
// It prints the manifest's digest. With -packages it prints the packages
// the Containerfile installs on the base, for the base's maker.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/deploy/container"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run() error {
	containerfile := flag.String("containerfile", "deploy/container/Containerfile", "the Containerfile whose final stage the image is")
	base := flag.String("base", "", "a tar of the base root file system (required)")
	bin := flag.String("bin", "bin", "the directory holding the programs")
	name := flag.String("name", "airlock:latest", "the image's name")
	out := flag.String("o", "", "the OCI layout tar to write (required)")
	packages := flag.Bool("packages", false, "print the packages the Containerfile installs on the base, and stop")
	flag.Parse()
	cf, err := os.Open(*containerfile)
	if err != nil {
		return err
	}
	spec, err := container.ParseContainerfile(cf)
	cf.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *containerfile, err)
	}
	if *packages {
		fmt.Println(strings.Join(spec.Packages, ","))
		return nil
	}
	if *base == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		return fmt.Errorf("-base and -o are required, and nothing else")
	}
	// Every time in the image: SOURCE_DATE_EPOCH, as reproducible builds
	// set it, else the Unix epoch.
	epoch := time.Unix(0, 0).UTC()
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", v, err)
		}
		epoch = time.Unix(n, 0).UTC()
	}
	f, err := os.CreateTemp(filepath.Dir(*out), ".imagebuild-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	digest, err := container.Build(f, container.Options{Spec: spec, Base: *base, Bin: *bin, Name: *name, Epoch: epoch})
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), *out); err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}
