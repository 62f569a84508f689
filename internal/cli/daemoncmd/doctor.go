package daemoncmd

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/landlock"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// check is one line of airlock doctor: what was checked, whether it
// passed, what was found, and the fix when it did not.
type check struct {
	name   string
	ok     bool
	warn   bool // passed, but worth a look
	found  string
	fix    string
	skipOK bool // not applicable here
}

// doctorCmd is `airlock doctor`: the kernel features, settings and
// files airlock needs, one line each, and a real sandbox at the end.
func doctorCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs := flag.NewFlagSet("airlock doctor", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	cfgPath := fs.String("config", "", "config file whose socket and image store are checked (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	stateDir := fs.String("state-dir", "/run/airlock", "state directory (advanced)")
	cgParent := fs.String("cgroup-parent", "/airlock", "cgroup under which sandboxes are created (no leading slash: below airlock's own) (advanced)")
	noSandbox := fs.Bool("no-sandbox", false, "check the host only; do not create a sandbox")
	runsc := fs.String("runsc", "", "gVisor's runsc to check (default: beside airlock, then "+strings.Join(gvisor.Dirs, ", ")+")")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock doctor [flags]\n\nChecks what airlock needs of this host, one line each with the fix when it\nfails: root, the kernel, user namespaces, cgroups and their controllers,\noverlayfs, Landlock, seccomp, what bounds the sandboxes' socket buffers,\nthe sandboxes' id range, the image store's file system,\nairlock-init, the daemon's socket; then creates a sandbox and runs a\ncommand in it. Exits 1 when a check fails.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	cfg, cfgErr := config.Discover(*cfgPath)
	checks := []check{
		checkRoot(),
		checkKernel(),
		checkUserNS(),
		checkCgroups(),
		checkFilesystem("overlayfs", "overlay", "modprobe overlay"),
		checkLandlock(),
		checkSeccomp(),
		checkSocketMemory(),
		checkIDRange(),
		checkInit(),
		checkStateDir(*stateDir),
	}
	if cfgErr != nil {
		checks = append(checks, check{name: "config", found: cfgErr.Error(), fix: "airlock config check --config FILE"})
	} else {
		checks = append(checks, check{name: "config", ok: true, found: orNone(cfg.Path)}, checkStore(cfg), checkSocket(cfg))
	}
	if !*noSandbox {
		checks = append(checks, checkSandbox(ctx, *stateDir, *cgParent))
	}
	checks = append(checks, checkGVisor(ctx, cfg, *runsc, *stateDir, *cgParent, !*noSandbox))
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		switch {
		case c.skipOK:
			mark = "--  "
		case !c.ok:
			mark, failed = "FAIL", failed+1
		case c.warn:
			mark = "warn"
		}
		fmt.Fprintf(stdio.Stdout, "%s  %-14s %s\n", mark, c.name, c.found)
		if c.fix != "" && (!c.ok || c.warn) {
			fmt.Fprintf(stdio.Stdout, "      %-14s fix: %s\n", "", c.fix)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdio.Stderr, "airlock doctor: %d check(s) failed\n", failed)
		return &cli.ExitError{Code: 1}
	}
	return nil
}

func orNone(p string) string {
	if p == "" {
		return "none found (the built-in default, no tools)"
	}
	return p
}

func checkRoot() check {
	if os.Geteuid() == 0 {
		return check{name: "root", ok: true, found: "running as root"}
	}
	return check{name: "root", found: fmt.Sprintf("running as uid %d", os.Geteuid()), fix: "run airlock as root (sudo, or the systemd service in deploy/)"}
}

func checkKernel() check {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return check{name: "kernel", found: err.Error()}
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	fmt.Sscanf(rel, "%d.%d", &major, &minor)
	c := check{name: "kernel", found: "Linux " + rel, ok: major > 5 || major == 5 && minor >= 12}
	if !c.ok {
		c.fix = "airlock needs Linux 5.12 or newer (idmapped mounts); 5.19+ for images"
	} else if major == 5 && minor < 19 {
		c.warn, c.fix = true, "images need 5.19 or newer (overlayfs over idmapped layers); plain runs work"
	}
	return c
}

func checkUserNS() check {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return check{name: "user ns", found: err.Error(), fix: "a kernel built with CONFIG_USER_NS"}
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if n < 64 {
		return check{name: "user ns", found: fmt.Sprintf("user.max_user_namespaces = %d", n), fix: "sysctl -w user.max_user_namespaces=65536 (and in /etc/sysctl.d)"}
	}
	return check{name: "user ns", ok: true, found: fmt.Sprintf("user.max_user_namespaces = %d", n)}
}

func checkCgroups() check {
	v, err := cgroup.Detect()
	if err != nil {
		return check{name: "cgroups", found: err.Error(), fix: "mount cgroup2 at /sys/fs/cgroup (systemd does)"}
	}
	want := []string{"memory", "pids", "cpu"}
	if v == cgroup.V2 {
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		have := strings.Fields(string(b))
		var missing []string
		for _, w := range want {
			if !contains(have, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return check{name: "cgroups", found: "v2, without " + strings.Join(missing, ", "), fix: "enable the controllers (a kernel with them; no cgroup_disable= on its command line)"}
		}
		return check{name: "cgroups", ok: true, found: "v2, controllers " + strings.Join(have, " ")}
	}
	var missing []string
	for _, w := range append(want, "cpuacct", "freezer") {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", w)); err != nil {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return check{name: "cgroups", found: "v1, without " + strings.Join(missing, ", "), fix: "mount the missing v1 hierarchies, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"}
	}
	return check{name: "cgroups", ok: true, found: "v1 (hybrid or legacy): memory, pids, cpu, cpuacct, freezer"}
}

// checkFilesystem looks for a file system type in /proc/filesystems.
func checkFilesystem(name, fsType, fix string) check {
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return check{name: name, found: err.Error()}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 && fields[len(fields)-1] == fsType {
			return check{name: name, ok: true, found: fsType + " is available"}
		}
	}
	return check{name: name, found: fsType + " is not in /proc/filesystems", fix: fix}
}

func checkLandlock() check {
	abi := landlock.ABI()
	if abi < 1 {
		return check{name: "landlock", ok: true, warn: true, found: "not available; sandboxes go without this layer",
			fix: "a kernel with CONFIG_SECURITY_LANDLOCK and landlock in lsm= (5.13+)"}
	}
	return check{name: "landlock", ok: true, found: fmt.Sprintf("ABI %d", abi)}
}

// checkSocketMemory says what bounds the sandboxes' socket buffers
// together: the host's TCP memory (net.ipv4.tcp_mem) is one count for
// every socket on the host, and past it every TCP socket stalls.
func checkSocketMemory() check {
	const name = "socket memory"
	all, err := sandbox.SocketCeiling()
	if err != nil {
		return check{name: name, ok: true, warn: true, found: err.Error()}
	}
	if v, err := cgroup.Detect(); err == nil && v == cgroup.V2 {
		return check{name: name, ok: true, warn: true,
			found: fmt.Sprintf("cgroup v2: the sandboxes' socket buffers together are bounded only by server.capacity.memory (each by its memory ceiling); the host's TCP memory reaches pressure at %d MiB", 2*all>>20),
			fix:   fmt.Sprintf("keep server.capacity.memory under %d MiB, or raise net.ipv4.tcp_mem", all>>20)}
	}
	return check{name: name, ok: true, found: fmt.Sprintf("the sandboxes' socket buffers held to %d MiB together, half of net.ipv4.tcp_mem's pressure threshold", all>>20)}
}

func checkSeccomp() check {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil || !strings.Contains(string(b), "\nSeccomp:") {
		return check{name: "seccomp", found: "the kernel reports no seccomp support", fix: "a kernel with CONFIG_SECCOMP_FILTER"}
	}
	return check{name: "seccomp", ok: true, found: "filter mode available"}
}

// checkIDRange looks for host users or groups inside the ids sandboxes
// and images are mapped to: they would own a sandbox's files.
func checkIDRange() check {
	lo, hi := uint64(sandbox.DefaultImageIDBase), uint64(sandbox.DefaultUIDBase)+4096*65536
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 3 {
				continue
			}
			if id, err := strconv.ParseUint(f[2], 10, 32); err == nil && id >= lo && id < hi {
				return check{name: "id range", found: fmt.Sprintf("%s has %s with id %d, inside airlock's ids %d-%d", file, f[0], id, lo, hi-1),
					fix: "give that account another id: sandboxes are mapped there"}
			}
		}
	}
	return check{name: "id range", ok: true, found: fmt.Sprintf("ids %d-%d are free of host users and groups", lo, hi-1)}
}

func checkInit() check {
	exe, err := os.Executable()
	if err != nil {
		return check{name: "airlock-init", found: err.Error()}
	}
	p := filepath.Join(filepath.Dir(exe), "airlock-init")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return check{name: "airlock-init", ok: true, warn: true, found: "not beside " + exe + "; sandboxes start from airlock itself (slower)",
			fix: "install airlock-init in the same directory as airlock and airlockd"}
	}
	return check{name: "airlock-init", ok: true, found: p}
}

// checkStore reports the image store's file system: images need
// idmapped mounts on it.
func checkStore(cfg *config.Config) check {
	dir := attach.StoreOptions(cfg.Images).Dir
	probe := dir
	for {
		if _, err := os.Stat(probe); err == nil || probe == "/" {
			break
		}
		probe = filepath.Dir(probe)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(probe, &st); err != nil {
		return check{name: "image store", found: err.Error()}
	}
	names := map[int64]string{unix.EXT4_SUPER_MAGIC: "ext4", unix.XFS_SUPER_MAGIC: "xfs", unix.BTRFS_SUPER_MAGIC: "btrfs", unix.TMPFS_MAGIC: "tmpfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return check{name: "image store", ok: true, found: fmt.Sprintf("%s on %s", dir, n)}
	}
	return check{name: "image store", ok: true, warn: true, found: fmt.Sprintf("%s on a file system of type %#x", dir, st.Type),
		fix: "images need idmapped mounts: put images.store on ext4, xfs, btrfs or tmpfs (plain runs do not use it)"}
}

func checkSocket(cfg *config.Config) check {
	sock := cfg.Server.Socket
	if sock == "" {
		sock = "/run/airlock/airlock.sock"
	}
	fi, err := os.Stat(sock)
	if err != nil {
		return check{name: "socket", skipOK: true, ok: true, found: sock + ": no daemon (airlock serve creates it)"}
	}
	st, _ := fi.Sys().(*unix.Stat_t)
	c := check{name: "socket", ok: true, found: fmt.Sprintf("%s mode %#o", sock, fi.Mode().Perm())}
	if st != nil {
		c.found += fmt.Sprintf(" uid %d gid %d", st.Uid, st.Gid)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		c.ok, c.fix = false, "the socket is open to every user; it should be 0660 (airlock serve makes it so)"
	}
	if !DaemonListening(sock) {
		c.warn, c.fix = true, "the socket exists but no daemon answers (a stopped daemon's leftover; the next serve replaces it)"
	}
	return c
}

// checkStateDir checks that the sandboxes' users can reach the state
// directory, below which each mounts its root.
func checkStateDir(dir string) check {
	if err := sandbox.CheckStateDir(dir); err != nil {
		return check{name: "state dir", found: err.Error(), fix: "make every directory above the state directory searchable by others (chmod o+x DIR), or pass another --state-dir"}
	}
	return check{name: "state dir", ok: true, found: dir}
}

// checkSandbox makes a real sandbox and runs /bin/true in it.
func checkSandbox(ctx context.Context, stateDir, cgParent string) check {
	start := time.Now()
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: stateDir, CgroupParent: cgParent, CloneInProcess: true, OneShot: true})
	if err != nil {
		return check{name: "sandbox", found: err.Error(), fix: "see the failed checks above; docs/architecture.md lists what a sandbox needs"}
	}
	defer rt.Close()
	sb, err := rt.Start(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits()})
	if err != nil {
		return check{name: "sandbox", found: "create: " + err.Error()}
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	r := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}, Capture: true})
	if r.ExitCode != 0 || r.Outcome != result.Exited {
		return check{name: "sandbox", found: fmt.Sprintf("run /bin/true: outcome %s, exit %d %s", r.Outcome, r.ExitCode, r.Error)}
	}
	return check{name: "sandbox", ok: true, found: fmt.Sprintf("created, ran /bin/true, destroyed (%s, cgroup v%d)", time.Since(start).Round(time.Millisecond), rt.CgroupVersion())}
}

// checkGVisor checks the gvisor isolation backend: runsc found, and
// (with sandbox) a gVisor sandbox made that runs /bin/true. Without runsc
// it fails only when the config has a tool that asks for gvisor.
func checkGVisor(ctx context.Context, cfg *config.Config, runsc, stateDir, cgParent string, sandboxToo bool) check {
	var needs []string
	if cfg != nil {
		for _, t := range cfg.Profiles() {
			if t.Isolation == sbspec.IsolationGVisor {
				needs = append(needs, t.Name)
			}
		}
	}
	fix := "build runsc (scripts/runsc in airlock's source, or CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@" + gvisor.PinnedVersion + ") and install it root-owned in " + gvisor.Dirs[0] + ", or pass --runsc (server.runsc in the config)"
	if runsc == "" && cfg != nil {
		// What serve would use: its --runsc, else the config's.
		runsc = cfg.Server.Runsc
	}
	path, err := gvisor.Find(runsc)
	if err != nil {
		if len(needs) == 0 {
			return check{name: "gvisor", skipOK: true, found: "not available (" + err.Error() + "); only tools with isolation: gvisor need it"}
		}
		return check{name: "gvisor", found: err.Error() + "; tools " + strings.Join(needs, ", ") + " ask for it", fix: fix}
	}
	found := path
	if v := gvisor.Version(path); v != "" {
		found += " " + v
	}
	if pc, err := gvisor.Precompiled(path); err == nil && !pc {
		found += " (without precompiled seccomp programs: it builds its filters at every sandbox's start, 35-40 ms; scripts/runsc builds one with them)"
	}
	if !sandboxToo {
		return check{name: "gvisor", ok: true, found: found}
	}
	start := time.Now()
	rt, err := sandbox.New(ctx, sandbox.Options{StateDir: stateDir, CgroupParent: cgParent, CloneInProcess: true, OneShot: true, Runsc: path})
	if err != nil {
		return check{name: "gvisor", found: err.Error()}
	}
	defer rt.Close()
	if _, _, err := rt.GVisor(ctx); err != nil {
		return check{name: "gvisor", found: found + ": " + err.Error(), fix: "see docs/isolation.md for what gVisor needs of the host"}
	}
	return check{name: "gvisor", ok: true, found: fmt.Sprintf("%s: created a gVisor sandbox, ran /bin/true, destroyed (%s)", found, time.Since(start).Round(time.Millisecond))}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
