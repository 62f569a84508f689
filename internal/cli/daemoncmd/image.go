package daemoncmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/pull"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/termtext"
)

const imageUsage = `Usage:
  airlock image import PATH [--name NAME]   import an OCI layout or archive, a docker save
                                            archive, or a root file system (directory or tarball);
                                            PATH - reads an archive from standard input
  airlock image pull REF [--name NAME] [--insecure]
                                            fetch an image from an OCI registry (credentials:
                                            images.registries in the config); content already
                                            stored is not fetched again; --insecure allows plain
                                            HTTP to a registry on a public address
  airlock image build [-f FILE] [--name NAME] [--build-arg K=V]... CONTEXT
                                            build an image from a Dockerfile (FILE, default
                                            CONTEXT/Dockerfile): each RUN in a sandbox of the
                                            image so far, without network; steps cached; flags
                                            --memory, --disk, --pids, --time bound each RUN
  airlock image ls                          list stored images
  airlock image inspect NAME|DIGEST         print an image's record as JSON
  airlock image rm [--force] NAME|DIGEST    remove a name (and the content once unnamed)
  airlock image gc                          remove content no name points at

Every subcommand takes --store DIR (default: the config's images.store, else
` + image.DefaultDir + `) and --config FILE.
`

func imageCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(stdio.Stderr, imageUsage)
			return &cli.ExitError{Code: cli.ExitUsage}
		}
		fmt.Fprint(stdio.Stdout, imageUsage)
		return nil
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("airlock image "+sub, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	storeDir := fs.String("store", "", "image store directory (default: the config's images.store, else "+image.DefaultDir+")")
	cfgPath := fs.String("config", "", "config file, for the store's settings and (rm) the tools to check (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	var name string
	var force, asJSON, insecure bool
	want := 1
	var bf buildFlags
	switch sub {
	case "build":
		bf.add(fs, &name)
	case "import":
		fs.StringVar(&name, "name", "", "name for the image; in an archive of several, the tag to import")
		fs.BoolVar(&asJSON, "json", false, "print the record as JSON")
	case "pull":
		fs.StringVar(&name, "name", "", "name for the image (default: the reference as given)")
		fs.BoolVar(&asJSON, "json", false, "print the record as JSON")
		fs.BoolVar(&insecure, "insecure", false, "allow plain HTTP when the registry does not answer HTTPS (as images.registries.HOST.insecure does; loopback and private addresses have it anyway)")
	case "ls":
		want = 0
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "inspect":
	case "rm":
		fs.BoolVar(&force, "force", false, "remove even if a configured tool or a live sandbox uses it")
	case "gc":
		want = 0
	default:
		return cli.UsageError(stdio.Stderr, "airlock image", "unknown subcommand %q (import, pull, build, ls, inspect, rm, gc)", sub)
	}
	// Flags may come before or after the one argument.
	var pos []string
	for {
		if done, err := cli.ParseFlags(fs, rest, stdio.Stderr); done {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != want {
		return cli.UsageError(stdio.Stderr, "airlock image "+sub, "want %d argument(s), got %d", want, len(pos))
	}
	cfg, err := config.Discover(*cfgPath)
	if err != nil {
		return err
	}
	opts := attach.StoreOptions(cfg.Images)
	if *storeDir != "" {
		opts.Dir = *storeDir
	}
	st, err := image.Open(opts)
	if err != nil {
		return err
	}
	switch sub {
	case "build":
		if err := bf.run(ctx, st, pos[0], name, stdio); err != nil {
			return err
		}
		tellDaemon(ctx, cfg, stdio)
		return nil
	case "import":
		cli.SignalsCaught(ctx) // an interrupted import removes what it unpacked
		start := time.Now()
		var imp *image.Imported
		if pos[0] == "-" {
			imp, err = st.ImportReader(ctx, stdio.Stdin, image.ImportOptions{Name: name})
		} else {
			imp, err = st.Import(ctx, pos[0], image.ImportOptions{Name: name})
		}
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdio.Stdout, imp.Image)
		}
		how := fmt.Sprintf("unpacked %d entries, %s in %.1fs", imp.Unpacked.Entries, humanSize(imp.Unpacked.Bytes), time.Since(start).Seconds())
		if imp.Existed {
			how = "already stored"
		}
		fmt.Fprintf(stdio.Stdout, "%s %s (%s)\n", imp.Name, imp.Digest, how)
		if r := imp.Unpacked; !imp.Existed && (r.Skipped > 0 || r.SetIDCleared > 0 || r.IDsClamped > 0) {
			fmt.Fprintf(stdio.Stdout, "neutralised: %d device nodes or FIFOs skipped, %d setuid/setgid bits cleared, %d owners outside ids 0-65535 made nobody\n",
				r.Skipped, r.SetIDCleared, r.IDsClamped)
		}
		tellDaemon(ctx, cfg, stdio)
		return nil
	case "pull":
		cli.SignalsCaught(ctx) // an interrupted pull removes what it fetched
		start := time.Now()
		o := pull.Options{Name: name, Progress: stdio.Stderr, MaxBytes: cfg.Images.MaxPull}
		if o.Username, o.Password, o.Insecure, err = registrySettings(cfg, pos[0]); err != nil {
			return err
		}
		o.Insecure = o.Insecure || insecure
		p, err := pull.Pull(ctx, st, pos[0], o)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdio.Stdout, p.Image)
		}
		how := fmt.Sprintf("fetched %s, unpacked %d entries, %s in %.1fs", humanSize(p.Fetched), p.Unpacked.Entries, humanSize(p.Unpacked.Bytes), time.Since(start).Seconds())
		if p.Existed {
			how = "already stored; nothing fetched"
		}
		fmt.Fprintf(stdio.Stdout, "%s %s (%s)\n", p.Name, p.Digest, how)
		tellDaemon(ctx, cfg, stdio)
		return nil
	case "ls":
		list, err := st.List()
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdio.Stdout, list)
		}
		tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDIGEST\tFORMAT\tSIZE\tIMPORTED")
		for _, img := range list {
			names := strings.Join(img.Names, ",")
			if names == "" {
				names = "<none>"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", names, img.Digest[:19], img.Format, humanSize(img.Unpacked.Bytes), img.Imported.Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "inspect":
		img, err := st.Resolve(pos[0])
		if err != nil {
			return noSuchImage(st, pos[0], err)
		}
		return printJSON(stdio.Stdout, img)
	case "rm":
		o := image.RemoveOptions{Force: force, Used: func(img *image.Image) string { return toolUsing(cfg, img) }}
		r, err := st.Remove(pos[0], o)
		if err != nil {
			return noSuchImage(st, pos[0], err)
		}
		fmt.Fprintf(stdio.Stdout, "removed %s", strings.Join(r.Names, ", "))
		if r.Digest != "" {
			fmt.Fprintf(stdio.Stdout, " and its content %s (%s)", r.Digest, humanSize(r.Bytes))
		}
		fmt.Fprintln(stdio.Stdout)
		return nil
	case "gc":
		removed, err := st.GC()
		for _, d := range removed {
			fmt.Fprintln(stdio.Stdout, "removed", d)
		}
		return err
	}
	return nil
}

// noSuchImage turns err, when it says ref is not in st, into a list of
// the names st has: one asking to remove or inspect an image means one of
// those, not an import.
func noSuchImage(st *image.Store, ref string, err error) error {
	if !errors.Is(err, image.ErrNotFound) {
		return err
	}
	imgs, lerr := st.List()
	if lerr != nil {
		return err
	}
	var names []string
	for _, img := range imgs {
		names = append(names, img.Names...)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return fmt.Errorf("no image %q: the store %s has none (airlock image import, airlock image pull)", ref, st.Dir())
	}
	return fmt.Errorf("no image %q in the store %s; it has: %s (or name one by digest: airlock image ls)", ref, st.Dir(), strings.Join(names, ", "))
}

// toolUsing names a configured tool whose image is img, or "".
func toolUsing(cfg *config.Config, img *image.Image) string {
	for _, t := range cfg.Profiles() {
		if t.Image == img.Digest || slices.Contains(img.Names, t.Image) {
			return t.Name
		}
	}
	return ""
}

// humanSize renders a byte count for people: "1.7 MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), "KMGTPE"
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, suffix[i])
}

// registrySettings is what the config says of ref's registry
// (images.registries): the credential, its password read from the
// secret, and whether plain HTTP is allowed.
func registrySettings(cfg *config.Config, ref string) (user, password string, insecure bool, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", "", false, fmt.Errorf("%w: %w", image.ErrInvalid, err)
	}
	host := r.Context().RegistryStr()
	reg, ok := cfg.Images.Registries[host]
	if !ok && host == name.DefaultRegistry {
		reg, ok = cfg.Images.Registries["docker.io"]
	}
	if !ok || reg.Secret == "" {
		return "", "", reg.Insecure, nil
	}
	s, ok := cfg.Secrets[reg.Secret]
	if !ok {
		return "", "", false, fmt.Errorf("images.registries.%s: no secret %q", host, reg.Secret)
	}
	pw, err := s.Read()
	if err != nil {
		return "", "", false, fmt.Errorf("images.registries.%s: %w", host, err)
	}
	return reg.Username, pw, reg.Insecure, nil
}

// tellDaemon asks the daemon on the config's socket, if one answers, to
// resolve its tools' image names again: a name just imported or pulled
// is then what its tools' next sandboxes are made from (their pools
// refilled), without a restart. No daemon is no error.
func tellDaemon(ctx context.Context, cfg *config.Config, stdio cli.IO) {
	sock := cfg.Server.Socket
	if sock == "" {
		sock = api.DefaultSocket
	}
	if _, err := os.Stat(sock); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := client.New(sock).ReloadImages(ctx)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "airlock image: the daemon on %s did not take the image (%v); airlock reload applies it\n", sock, err)
		return
	}
	if len(rep.Changed) > 0 {
		fmt.Fprintf(stdio.Stdout, "the daemon makes the next sandboxes of %s from it\n", termtext.String(strings.Join(rep.Changed, ", ")))
	}
}
