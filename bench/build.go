package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The build section times `airlock image build` against buildah (Debian's
// buildah with runc), the same Dockerfile and context, cold (a fresh
// store holding the base alone) and fully cached (the same build again).
// Targets (issue 38): a fully cached rebuild at most 1 s; a cold build at
// most 1.2× buildah's.

// buildWork holds the context, the stores and, when they must be made,
// the Debian fixtures; removed when the section ends.
const buildWork = "/var/tmp/airlock-bench-build"

const (
	buildCachedTarget = time.Second
	buildColdTarget   = 1.2
)

// buildDockerfile installs a Debian package from the context with dpkg,
// does some file work and copies a script: no network, so that both
// builders do the same steps (buildah with --network none, airlock's
// steps with nothing allowed).
const buildDockerfile = `FROM debian:bookworm
COPY app/ /opt/app/
RUN dpkg -i /opt/app/hello_*.deb && hello > /opt/app/greeting
RUN cd /opt/app && for i in $(seq 1 2000); do echo $i > f$i; done && tar cf /opt/files.tar f* && rm f*
COPY run.sh /usr/local/bin/
CMD ["/usr/local/bin/run.sh"]
`

func buildBench(n int) error {
	n = max(n, 1)
	if err := freshDir(buildWork); err != nil {
		return err
	}
	defer os.RemoveAll(buildWork)
	fixtures := os.Getenv("AIRLOCK_TEST_DEBIAN")
	if fixtures == "" {
		fixtures = filepath.Join(buildWork, "fixtures")
		if out, err := exec.Command("./scripts/debian-fixtures", fixtures).CombinedOutput(); err != nil {
			return fmt.Errorf("build: scripts/debian-fixtures: %v: %s", err, out)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(fixtures, "pool", "*.deb"))
	if len(debs) == 0 {
		return fmt.Errorf("build: no package in %s/pool", fixtures)
	}
	ctxDir := filepath.Join(buildWork, "ctx")
	if err := os.MkdirAll(filepath.Join(ctxDir, "app"), 0o755); err != nil {
		return err
	}
	for name, data := range map[string]string{"Dockerfile": buildDockerfile, "run.sh": "#!/bin/sh\ncat /opt/app/greeting\n"} {
		if err := os.WriteFile(filepath.Join(ctxDir, name), []byte(data), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(debs[0], filepath.Join(ctxDir, "app", filepath.Base(debs[0]))); err != nil {
		return err
	}
	air, _, err := programs()
	if err != nil {
		return err
	}
	base := filepath.Join(fixtures, "minbase.tar")
	_, errB := exec.LookPath("buildah")
	_, errR := exec.LookPath("runc")
	peer := errB == nil && errR == nil

	// airlockCold makes a store holding the base (untimed) and times the
	// build, then the same build again.
	store := filepath.Join(buildWork, "store")
	airlockRound := func() (cold, cached time.Duration, err error) {
		os.RemoveAll(store)
		if out, err := exec.Command(air, "image", "import", base, "--name", "debian:bookworm", "--store", store).CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("import: %v: %s", err, out)
		}
		build := func() (time.Duration, error) {
			cmd := exec.Command(air, "image", "build", "--store", store, "--name", "built", ctxDir)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			d := time.Since(start)
			if err != nil {
				return 0, fmt.Errorf("airlock image build: %v: %s", err, out)
			}
			return d, nil
		}
		if cold, err = build(); err != nil {
			return
		}
		cached, err = build()
		return
	}
	broot := filepath.Join(buildWork, "buildah")
	bargs := []string{"--root", filepath.Join(broot, "root"), "--runroot", filepath.Join(broot, "runroot"), "--storage-driver", "overlay"}
	buildah := func(args ...string) ([]byte, error) {
		return exec.Command("buildah", append(append([]string{}, bargs...), args...)...).CombinedOutput()
	}
	buildahRound := func() (cold, cached time.Duration, err error) {
		buildah("rm", "-a")
		buildah("rmi", "-af")
		os.RemoveAll(broot)
		c, err := buildah("from", "scratch")
		if err != nil {
			return 0, 0, fmt.Errorf("buildah from scratch: %v: %s", err, c)
		}
		ctr := string(c[:len(c)-1])
		if out, err := buildah("add", ctr, base, "/"); err != nil {
			return 0, 0, fmt.Errorf("buildah add: %v: %s", err, out)
		}
		if out, err := buildah("commit", "-q", ctr, "debian:bookworm"); err != nil {
			return 0, 0, fmt.Errorf("buildah commit: %v: %s", err, out)
		}
		buildah("rm", ctr)
		build := func() (time.Duration, error) {
			start := time.Now()
			out, err := buildah("bud", "-q", "--runtime", "runc", "--layers", "--network", "none", "-t", "built", ctxDir)
			d := time.Since(start)
			if err != nil {
				return 0, fmt.Errorf("buildah bud: %v: %s", err, out)
			}
			return d, nil
		}
		if cold, err = build(); err != nil {
			return
		}
		cached, err = build()
		return
	}
	defer func() {
		if peer {
			buildah("rm", "-a")
			buildah("rmi", "-af")
		}
	}()
	aCold, aCached := &series{name: "airlock cold"}, &series{name: "airlock cached"}
	bCold, bCached := &series{name: "buildah cold"}, &series{name: "buildah cached"}
	// One untimed round each first (page cache, binaries).
	for i := -1; i < n; i++ {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, mine := range order {
			if !mine && !peer {
				continue
			}
			var cold, cached time.Duration
			var err error
			if mine {
				cold, cached, err = airlockRound()
			} else {
				cold, cached, err = buildahRound()
			}
			if err != nil {
				return err
			}
			if i < 0 {
				continue
			}
			if mine {
				aCold.d, aCached.d = append(aCold.d, cold), append(aCached.d, cached)
			} else {
				bCold.d, bCached.d = append(bCold.d, cold), append(bCached.d, cached)
			}
		}
	}
	fmt.Printf("\n## Image builds (%d rounds, interleaved)\n\n", n)
	fmt.Printf("The same Dockerfile and context (a Debian bookworm minbase, a package installed with dpkg from the context, 2,000 files made and archived, a script copied; no network), built by `airlock image build` (whole process) and by buildah %s: cold, into a store holding the base alone (made untimed each round), then the same build again, fully cached.\n\n",
		map[bool]string{true: "(`buildah bud --layers --runtime runc --network none`, overlay storage)", false: "(not installed here: apt-get install buildah runc)"}[peer])
	fmt.Println("| build | airlock p50 | buildah p50 | airlock / buildah | target |\n| --- | --- | --- | --- | --- |")
	row := func(name string, a, b *series, target string, ok func(a, b time.Duration) bool) {
		pa := a.pct(0.5)
		if !peer {
			fmt.Printf("| %s | %s | - | - | %s |\n", name, ms(pa), target)
			return
		}
		pb := b.pct(0.5)
		verdict := "missed"
		if ok(pa, pb) {
			verdict = "met"
		}
		fmt.Printf("| %s | %s | %s | %.2f× | %s: %s |\n", name, ms(pa), ms(pb), float64(pa)/float64(pb), target, verdict)
	}
	row("cold", aCold, bCold, fmt.Sprintf("≤ %.1f× buildah", buildColdTarget), func(a, b time.Duration) bool { return float64(a) <= buildColdTarget*float64(b) })
	row("fully cached", aCached, bCached, fmt.Sprintf("≤ %v", buildCachedTarget), func(a, _ time.Duration) bool { return a <= buildCachedTarget })
	return nil
}
