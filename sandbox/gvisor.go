package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/gvisor"
	"github.com/airlockhq/airlock/internal/linux/cgroup"
	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/result"
)

// Isolation backends (Spec.Isolation).
const (
	// IsolationNamespaces is the default backend: namespaces, a private
	// uid range, seccomp and Landlock on the host's kernel.
	IsolationNamespaces = sbspec.IsolationNamespaces
	// IsolationGVisor runs the sandbox under gVisor (runsc, systrap
	// platform, no KVM): the commands' system calls are served by an
	// application kernel in user space, itself confined on the host.
	IsolationGVisor = sbspec.IsolationGVisor
)

// Ceilings below these leave a gVisor sandbox too little to start: its
// own processes (runsc, the sentry, the gofer) count in the sandbox's
// memory and pids.
const (
	GVisorMinMemory = sbspec.GVisorMinMemory
	GVisorMinPids   = sbspec.GVisorMinPids
)

// ValidIsolation checks a backend's name ("" is the default).
func ValidIsolation(name string) error {
	switch name {
	case "", IsolationNamespaces, IsolationGVisor:
		return nil
	}
	return fmt.Errorf("isolation %q: want %s or %s", name, IsolationNamespaces, IsolationGVisor)
}

// UnsupportedError is what a backend refuses by name: a feature it does
// not give (What), or a ceiling too low for it. Its text is written for
// the caller (no host detail), and it is in the class errdefs.ErrInvalid.
type UnsupportedError struct {
	// Msg says what is refused and why.
	Msg string
}

func (e *UnsupportedError) Error() string { return e.Msg }

// Is puts it in the class of bad input: the caller asked for what the
// tool's backend cannot give.
func (e *UnsupportedError) Is(target error) bool { return target == errdefs.ErrInvalid }

// gvisorState is what a gVisor sandbox has that the other backend's has
// not.
type gvisorState struct {
	// bundle is the sandbox's directory on the host: the OCI bundle,
	// runsc's state, and the mount point of the scratch tmpfs, which is
	// mounted in runsc's own mount namespace only (gone with its last
	// process).
	bundle string
	// root is the container's read-only root: the bundle's own with an
	// image, else one the runtime's sandboxes share (gvisor_root.go).
	root string
	// netPidOnce finds netPid, a process of the sandbox that lives in
	// its network namespace (the sentry), whose /proc/PID/net is the
	// sandbox's.
	netPidOnce sync.Once
	netPid     int
	// fdsHeld is what init said a process of the guest holds when it
	// met the descriptor ceiling (see noteDescriptors), or 0.
	fdsHeld atomic.Int64

	// A sandbox made for one command (Spec.OneCommand) starts when its
	// command comes (gvisor_direct.go): launch is its start until taken
	// (under launchMu), launched is closed once the start taken has been
	// tried (launchErr its error), and it is nil for other sandboxes.
	launchMu  sync.Mutex
	launch    *gvisorLaunch
	launched  chan struct{}
	launchErr error
	// direct says the command runs as the container's process, with no
	// init; directID is its exec's id, directArgv0 its program, stderr
	// the host's copy of its standard error until its end is known, and
	// exitErr what ended it when runsc said nothing of its command. All
	// are set before launched is closed, or (exitErr) s.dead.
	direct      bool
	directID    uint64
	directArgv0 string
	stderr      int
	exitErr     error
}

// noteDescriptors takes init's word that a process of the guest holds n
// descriptors, as many as the ceiling lets it: the commands' descriptors
// are the guest kernel's, which only init sees (see sbinit's fdWatch).
// The monitor of each running command then names the breach, as it does
// for the other backend's host-side look. A count below the ceiling is
// no breach, and is ignored; the first count is kept.
func (g *gvisorState) noteDescriptors(n int, ceiling int64) {
	if int64(n) >= ceiling && ceiling > 0 {
		g.fdsHeld.CompareAndSwap(0, int64(n))
	}
}

func (g *gvisorState) scratch() string { return filepath.Join(g.bundle, "scratch") }

// runsc finds the runsc to use: once found, that one; until then it
// looks again each time (runsc installed while the daemon runs).
func (rt *Runtime) runsc() (string, error) {
	rt.runscMu.Lock()
	defer rt.runscMu.Unlock()
	if rt.runscPath != "" {
		return rt.runscPath, nil
	}
	p, err := gvisor.Find(rt.opts.Runsc)
	if err != nil {
		return "", err
	}
	rt.runscPath = p
	return p, nil
}

// goferNetNS is the network namespace of every gVisor sandbox's gofer:
// an empty one of this runtime's, made once. runsc would make one for
// each gofer otherwise (its shared "null" namespace is pinned by a mount
// in runsc's mount namespace, which is each sandbox's own here), and a
// network namespace costs a millisecond to make and more CPU to tear
// down, on the kernel's worker threads. The gofer serves files and opens
// no socket; runsc's own default is one such namespace for every
// sandbox of a host.
func (rt *Runtime) goferNetNS() (*os.File, error) {
	rt.runscMu.Lock()
	defer rt.runscMu.Unlock()
	if rt.goferNS != nil {
		return rt.goferNS, nil
	}
	ns, err := netns.New()
	if err != nil {
		return nil, fmt.Errorf("the gofers' network namespace: %w", err)
	}
	rt.goferNS = ns
	return ns, nil
}

// checkGVisorSpec refuses what the gVisor backend does not do (yet), by
// name.
func checkGVisorSpec(spec *Spec) error {
	no := func(what string) error {
		return &UnsupportedError{Msg: fmt.Sprintf("%s: not available with isolation %s", what, IsolationGVisor)}
	}
	switch {
	case spec.User != nil && spec.User.UID == 0:
		// gVisor takes its own uid 0 for the global root that may send
		// SIGIO to any process (its sigio_perm), init included; the
		// other backend's root is no host root.
		return no("commands as root")
	case spec.Limits.Memory < GVisorMinMemory:
		return &UnsupportedError{Msg: fmt.Sprintf("memory ceiling %d bytes: isolation %s needs %d MiB at least (gVisor's own processes count in it)", spec.Limits.Memory, IsolationGVisor, GVisorMinMemory>>20)}
	case spec.Limits.Pids < GVisorMinPids:
		return &UnsupportedError{Msg: fmt.Sprintf("pids ceiling %d: isolation %s needs %d at least (gVisor's own threads count in it)", spec.Limits.Pids, IsolationGVisor, GVisorMinPids)}
	}
	return nil
}

// startGVisor starts the sandbox's runsc with init as the container's
// process, init's control socket passed in as its fd 3 (see
// prepareGVisor and gvisorLaunch.start).
func (s *Sandbox) startGVisor(ctrl, log *os.File, spec Spec, mounts []Mount) error {
	l, err := s.prepareGVisor(spec, mounts)
	if err != nil {
		return err
	}
	defer l.release()
	return l.start(s, ctrl, log, nil)
}

// gvisorLaunch is a gVisor sandbox built but for its runsc: the bundle's
// root and files, its network namespace taken, and what runsc's clone
// needs (the descriptors of the image, the volumes and the seed, the
// cgroup's). start clones runsc; release closes what it held.
type gvisorLaunch struct {
	c         gvisor.Container
	runsc     string
	goferNS   *os.File
	prog      *forkexec.Prog
	progFiles []int
	// closers are the descriptors held for the clone.
	closers []func()
	// cgroupFD (v2) or cgroupTasks (v1) put runsc in the sandbox's
	// cgroup as it is born.
	cgroupFD    int
	cgroupTasks []int
	// uid is the commands' uid in the sandbox (init's is another).
	uid int
	// ctrl and log are init's control socket and output, for a start
	// with init (see Spec.OneCommand); nil when the caller holds them.
	ctrl, log *os.File
}

func (l *gvisorLaunch) release() {
	for _, c := range l.closers {
		c()
	}
	l.closers = nil
	closeFile(l.ctrl)
	closeFile(l.log)
	l.ctrl, l.log = nil, nil
}

// prepareGVisor builds what a gVisor sandbox is before its runsc
// starts: the bundle's root, with the mount points, the host image's
// symlinks and the generated /etc; the container's description but for
// its process; the sandbox's network namespace; and runsc's clone's
// program, whose first act (raw system calls, as the other backend's)
// mounts the sandbox's size-limited scratch tmpfs where the bundle binds
// /workspace and /tmp from.
func (s *Sandbox) prepareGVisor(spec Spec, mounts []Mount) (_ *gvisorLaunch, err error) {
	rt := s.rt
	runsc, err := rt.runsc()
	if err != nil {
		return nil, err
	}
	b, err := rt.base()
	if err != nil {
		return nil, err
	}
	g := &gvisorState{bundle: filepath.Join(rt.bundleDir(), s.id), stderr: -1}
	s.gv = g
	l := &gvisorLaunch{runsc: runsc, cgroupFD: -1}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	if err := os.MkdirAll(filepath.Dir(g.bundle), 0o711); err != nil {
		return nil, fmt.Errorf("gvisor bundle: %w", err)
	}
	// Traversable by the sandbox's own ids: runsc's gofer opens the root
	// and the mount sources as the sandbox's uid 0, an unprivileged host
	// uid of its range.
	if err := os.Mkdir(g.bundle, 0o711); err != nil {
		return nil, fmt.Errorf("gvisor bundle: %w", err)
	}
	initPath := rt.opts.InitPath
	if initPath == selfPath {
		if initPath, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("init program: %w", err)
		}
	}
	uid, gid := sandboxUID, sandboxGID
	if spec.User != nil {
		uid, gid = int(spec.User.UID), int(spec.User.GID)
	}
	initUID := idRangeSize - 1
	if uid == initUID {
		initUID--
	}
	c := gvisor.Container{
		Args: []string{sbinit.GVisorPath},
		Env: append(append([]string{}, rt.initEnv...),
			sbinit.GVisorIDsEnv+"="+sbinit.FormatGVisorIDs(uid, gid, initUID)),
		Cwd: "/",
		// Init starts as its own uid with the commands' group, no
		// supplementary one, an empty bounding set and CAP_SETUID alone,
		// which it drops once it has taken the commands' uid as its
		// effective one (see sbinit's confineInGVisor).
		UID:  uint32(initUID),
		GID:  uint32(gid),
		Caps: []string{"CAP_SETUID"},
		Rlimits: []gvisor.Rlimit{
			{Type: "RLIMIT_NOFILE", Soft: uint64(s.limits.FDs), Hard: uint64(s.limits.FDs)},
			{Type: "RLIMIT_CORE"},
		},
		Hostname:    spec.Hostname,
		IDBase:      s.ids.base,
		IDSize:      idRangeSize,
		NetNS:       "/proc/self/fd/4",
		MemoryBytes: s.limits.Memory,
	}
	// The root holds the mount points, the host image's symlinks and the
	// generated /etc; it is served read-only. Its binds are made by
	// runsc's clone in its own mount namespace (scratchProg), so that the
	// host sees the sandbox's file system as the guest does, below
	// root, for the files API (OpenRoot, OpenDir). With an image, the
	// same go into a layer of their own (gen) that the clone lays over
	// the image, as the other backend's program does (see sbinit's
	// imageRoot): nothing airlock mounts or writes lands on a path the
	// image controls.
	var im *imageLayers
	if spec.Image != nil {
		im = &imageLayers{gen: filepath.Join(g.bundle, "gen"), img: filepath.Join(g.bundle, "image"), writable: spec.Image.Writable, rootID: int(s.ids.base)}
		c.RootWritable = spec.Image.Writable
	}
	hostBinds, symlinks, etc := b.image.binds, b.image.symlinks, etcFiles(spec.Hostname, spec.User)
	if im != nil {
		// The image brings its own system directories; of /etc, airlock
		// writes only what names the network (see Runtime.setup).
		hostBinds, symlinks = nil, nil
		etc = slices.DeleteFunc(etc, func(f sbinit.File) bool { return !imageEtc[f.Path] })
	}
	binds := append(slices.Clip(hostBinds), mountsAsBinds(mounts)...)
	binds = append(binds, sbinit.Bind{Source: initPath, Target: sbinit.GVisorPath, File: true})
	rc := rootContent{symlinks: symlinks, etc: etc, binds: binds, volumes: volumeTargets(spec.Volumes)}
	root := filepath.Join(g.bundle, "root")
	if im == nil {
		// The same for every sandbox of the same content: made once
		// (gvisor_root.go), as the mounts on it are each runsc's own.
		if root, err = rt.sharedRoot(rc); err != nil {
			return nil, fmt.Errorf("gvisor root: %w", err)
		}
	} else {
		for _, d := range []string{root, im.gen, im.img} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return nil, fmt.Errorf("gvisor root: %w", err)
			}
		}
		if err := rc.fill(im.gen); err != nil {
			return nil, fmt.Errorf("gvisor root: %w", err)
		}
	}
	c.Root, g.root = root, root
	for _, v := range spec.Volumes {
		// A mount of its own in the guest too, writable, whose files
		// gVisor revalidates (the host's files API writes them).
		c.Mounts = append(c.Mounts, gvisor.Mount{Destination: v.Target, Source: filepath.Join(root, v.Target), Type: "bind"})
	}
	// The writable directories are mounts of their own in the guest too,
	// whose files gVisor revalidates (the host's files API writes them).
	c.Mounts = append(c.Mounts,
		gvisor.Mount{Destination: "/proc", Type: "proc", Source: "proc"},
		gvisor.Mount{Destination: HomeDir, Source: scratchSource(g.scratch(), "workspace", spec.Seed != nil), Type: "bind"},
		gvisor.Mount{Destination: "/tmp", Source: scratchSource(g.scratch(), "tmp", spec.Seed != nil), Type: "bind"},
	)
	if err := os.Mkdir(g.scratch(), 0o700); err != nil {
		return nil, fmt.Errorf("gvisor bundle: %w", err)
	}
	if s.netns, err = rt.nets.take(); err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	if l.goferNS, err = rt.goferNetNS(); err != nil {
		return nil, err
	}
	hold := func(m *os.File) {
		l.closers = append(l.closers, func() { m.Close() })
		l.progFiles = append(l.progFiles, int(m.Fd()))
	}
	if im != nil {
		// The image, as an idmapped mount (its ids onto the sandbox's
		// range), for the clone to attach below the generated layer.
		m, err := s.mountImage(spec.Image)
		if err != nil {
			return nil, err
		}
		hold(m)
	}
	// The volumes, as idmapped writable mounts, for the clone to attach
	// at their targets in the root.
	var volumes []string
	for _, v := range spec.Volumes {
		m, err := s.mountVolume(v)
		if err != nil {
			return nil, err
		}
		hold(m)
		volumes = append(volumes, filepath.Join(root, v.Target))
	}
	if spec.Seed != nil {
		// The seed, as an idmapped read-only mount: the lower layers of
		// /workspace and /tmp (see scratchProg).
		m, err := s.mountSeed(spec.Seed)
		if err != nil {
			return nil, err
		}
		hold(m)
	}
	l.prog = scratchProg(g.scratch(), root, im, binds, volumes, spec.Seed != nil, s.limits, int(s.ids.base)+uid, int(s.ids.base)+gid)
	if s.group.Version() == cgroup.V2 {
		fd, err := s.group.DirFD()
		if err != nil {
			return nil, err
		}
		l.closers = append(l.closers, func() { unix.Close(fd) })
		l.cgroupFD = fd
	} else {
		tasks, err := s.group.TasksFDs()
		if err != nil {
			return nil, err
		}
		l.closers = append(l.closers, func() { closeFDs(tasks) })
		l.cgroupTasks = tasks
	}
	l.c, l.uid = c, uid
	return l, nil
}

// directCmd is the command a one-command gVisor sandbox runs as its
// container's process, in place of init (see Spec.OneCommand): its
// argv, environment and working directory, and the sandbox's ends of its
// standard streams.
type directCmd struct {
	argv, env []string
	dir       string
	stdio     [3]int
}

// start writes the bundle's config.json and clones runsc into the
// sandbox's cgroup and a mount namespace of its own (the clone runs
// scratchProg before its exec). The container's process is init, its
// control socket ctrl passed in as fd 3 and its output going to log; or
// with cmd, the command itself, its streams passed in as fds 0 to 2, and
// runsc's own output and log going to log (see gvisor.ExitFromLog).
func (l *gvisorLaunch) start(s *Sandbox, ctrl, log *os.File, cmd *directCmd) error {
	g := s.gv
	c := l.c
	if cmd != nil {
		c.Args, c.Env, c.Cwd = cmd.argv, cmd.env, cmd.dir
		c.UID, c.Caps = uint32(l.uid), nil
		c.PathLookup = true
	}
	cfg, err := c.Config()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.bundle, "config.json"), cfg, 0o600); err != nil {
		return fmt.Errorf("gvisor bundle: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	argv := append([]string{gvisor.Name}, gvisor.Flags(filepath.Join(g.bundle, "state"))...)
	// /dev/null as runsc's standard input, the log as its output, the
	// sandbox's network namespace as fd 4, the gofers' (goferNetNS) as 5;
	// init's control socket as fd 3 (--pass-fd), or a command's standard
	// streams as 3, 6 and 7, its 0 to 2.
	files := []int{int(null.Fd()), int(log.Fd()), int(log.Fd()), -1, int(s.netns.Fd()), int(l.goferNS.Fd())}
	if cmd == nil {
		files[3] = int(ctrl.Fd())
		argv = append(argv, "--gofer-network-namespace=/proc/self/fd/5",
			"run", "--bundle", g.bundle, "--pass-fd", "3:3", s.id)
	} else {
		files[3] = cmd.stdio[0]
		files = append(files, cmd.stdio[1], cmd.stdio[2])
		// runsc's own log, the run command's alone, says how the
		// command ended (see gvisor.ExitFromLog).
		argv = append(argv, "--debug-log="+g.runscLog(), "--debug-command=run",
			"--gofer-network-namespace=/proc/self/fd/5",
			"run", "--bundle", g.bundle, "--pass-fd", "3:0", "--pass-fd", "6:1", "--pass-fd", "7:2", s.id)
	}
	sp := forkexec.Spec{
		Path: l.runsc, Argv: argv,
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: files,
		// A mount namespace of its own, for the scratch tmpfs; a
		// session of its own, out of reach of a terminal's signals to
		// the caller's process group.
		Flags:  unix.CLONE_NEWNS,
		Setsid: true, DefaultSignals: true,
		UID: -1, GID: -1, CgroupFD: l.cgroupFD, CgroupTasks: l.cgroupTasks,
		Prog:      l.prog,
		ProgFiles: l.progFiles,
	}
	child, err := forkexec.Start(sp)
	if err != nil {
		var fe *forkexec.Error
		if errors.As(err, &fe) && fe.Step == "setup" {
			return fmt.Errorf("gvisor sandbox setup: %w", err)
		}
		return fmt.Errorf("start runsc: %w", err)
	}
	pidfd, err := pidFile(child.PidFD)
	if err != nil {
		child.Kill()
		return err
	}
	s.pid, s.pidfd = child.Pid, pidfd
	return nil
}

// runscTableFD is a descriptor runsc is born with, /dev/null (see
// scratchProg), so that its table of descriptors, and its children's,
// have room up to it from the start. runsc's sandbox process moves its
// standard streams to fds 253 to 255 (boot.startingStdioFD), and a
// multithreaded process that grows its table past 64 waits there for an
// RCU grace period: 9-14 ms of every start on this machine.
const runscTableFD = 256

// scratchSource is the directory of the scratch tmpfs (dir) the guest's
// /workspace or /tmp (d) is: the tmpfs's own, or with a seed the overlay
// of it over the seed's.
func scratchSource(dir, d string, seeded bool) string {
	if seeded {
		return filepath.Join(dir, ".merged-"+d)
	}
	return filepath.Join(dir, d)
}

// imageLayers are the directories of a gVisor sandbox's bundle that its
// root is made of when it has an image: gen, the generated layer (the
// mount points and airlock's /etc files), over img, where the image is
// attached.
//
// A writable root adds an upper layer on the scratch tmpfs (under the
// disk ceiling), owned by the sandbox's root (rootID on the host), which
// the gofer writes as: the host's files API then sees what the guest
// wrote, as it does through the other backend's overlay.
type imageLayers struct {
	gen, img string
	writable bool
	rootID   int
}

func mountsAsBinds(ms []Mount) []sbinit.Bind {
	out := make([]sbinit.Bind, 0, len(ms))
	for _, m := range ms {
		fi, err := os.Stat(m.Source)
		out = append(out, sbinit.Bind{Source: m.Source, Target: m.Target, File: err == nil && !fi.IsDir()})
	}
	return out
}

// scratchProg is what runsc's clone runs before its exec: keep its mounts
// to itself; mount the scratch tmpfs (the sandbox's disk ceiling, bytes
// and inodes) at dir, with /workspace (the commands' user's) and /tmp
// (sticky, everyone's) on it; and bind into root, read-only, nosuid and
// nodev, what the sandbox sees of the host (binds), and the scratch
// directories writable; then give runsc its descriptor runscTableFD.
// With an image (im), root is first an overlay, read-only, of the
// generated layer over the image (the program's file 0, an idmapped
// mount). The volumes (the program's next files, idmapped writable
// mounts) are attached at their targets (volumes: their paths below
// root).
func scratchProg(dir, root string, im *imageLayers, binds []sbinit.Bind, volumes []string, seeded bool, l Limits, uid, gid int) *forkexec.Prog {
	p := &forkexec.Prog{}
	str := func(s string) forkexec.Arg {
		p.Blobs = append(p.Blobs, append([]byte(s), 0))
		return forkexec.Arg{Kind: forkexec.ArgBlob, Index: uint32(len(p.Blobs) - 1)}
	}
	imm := func(v int64) forkexec.Arg { return forkexec.Arg{Kind: forkexec.ArgImm, Imm: uint64(v)} }
	sys := func(what string, trap uintptr, args ...forkexec.Arg) {
		op := forkexec.Op{Trap: trap, Save: forkexec.NoSave, What: what}
		copy(op.Args[:], args)
		p.Ops = append(p.Ops, op)
	}
	// struct mount_attr: attr_set, attr_clr, propagation, userns_fd.
	var attr []byte
	for _, v := range []uint64{unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, 0, 0, 0} {
		attr = binary.NativeEndian.AppendUint64(attr, v)
	}
	p.Blobs = append(p.Blobs, attr)
	readOnly := forkexec.Arg{Kind: forkexec.ArgBlob, Index: uint32(len(p.Blobs) - 1)}
	bind := func(src, dst string, ro bool) {
		sys("bind "+dst, unix.SYS_MOUNT, str(src), str(dst), imm(0), imm(unix.MS_BIND|unix.MS_REC), imm(0))
		if ro {
			sys("make "+dst+" read-only", unix.SYS_MOUNT_SETATTR, imm(unix.AT_FDCWD), str(dst),
				imm(unix.AT_SYMLINK_NOFOLLOW|unix.AT_RECURSIVE), readOnly, imm(int64(len(attr))))
		}
	}
	ws, tmp := filepath.Join(dir, "workspace"), filepath.Join(dir, "tmp")
	sys("make the mounts private", unix.SYS_MOUNT, str("none"), str("/"), imm(0), imm(unix.MS_REC|unix.MS_PRIVATE), imm(0))
	opts := "mode=0755,size=" + strconv.FormatInt(l.Disk, 10) + ",nr_inodes=" + strconv.FormatInt(l.inodes(), 10)
	sys("mount the scratch tmpfs", unix.SYS_MOUNT, str("airlock"), str(dir), str("tmpfs"), imm(unix.MS_NOSUID|unix.MS_NODEV), str(opts))
	sys("make /workspace", unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(ws), imm(0o755))
	sys("chown /workspace", unix.SYS_FCHOWNAT, imm(unix.AT_FDCWD), str(ws), imm(int64(uid)), imm(int64(gid)), imm(0))
	sys("make /tmp", unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(tmp), imm(0o1777))
	sys("chmod /tmp", unix.SYS_FCHMODAT, imm(unix.AT_FDCWD), str(tmp), imm(0o1777))
	if im != nil {
		p.NFiles = 1
		sys("attach the image", unix.SYS_MOVE_MOUNT, forkexec.Arg{Kind: forkexec.ArgSlot, Index: 0}, str(""), imm(unix.AT_FDCWD), str(im.img), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
		opts, flags := "lowerdir="+im.gen+":"+im.img, int64(unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
		if im.writable {
			upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
			for _, d := range []string{upper, work} {
				sys("make "+d, unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(d), imm(0o755))
				sys("chown "+d, unix.SYS_FCHOWNAT, imm(unix.AT_FDCWD), str(d), imm(int64(im.rootID)), imm(int64(im.rootID)), imm(0))
			}
			opts += ",upperdir=" + upper + ",workdir=" + work
			flags &^= unix.MS_RDONLY
		}
		sys("mount the root's overlay", unix.SYS_MOUNT, str("overlay"), str(root), str("overlay"), imm(flags), str(opts))
	}
	for _, b := range binds {
		bind(b.Source, filepath.Join(root, b.Target), true)
	}
	// With a seed (the program's last file, after the image's and the
	// volumes'), /workspace and /tmp are overlays of the tmpfs's
	// directories over the seed's, as the other backend's (see sbinit's
	// seed): nothing is copied, and what the sandbox changes lands on
	// the tmpfs.
	first := p.NFiles
	if seeded {
		seed := filepath.Join(dir, ".seed")
		sys("make "+seed, unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(seed), imm(0o700))
		sys("attach the seed", unix.SYS_MOVE_MOUNT, forkexec.Arg{Kind: forkexec.ArgSlot, Index: uint32(first + len(volumes))}, str(""), imm(unix.AT_FDCWD), str(seed), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
		for _, d := range []string{"workspace", "tmp"} {
			work, merged := filepath.Join(dir, ".work-"+d), scratchSource(dir, d, true)
			sys("make "+work, unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(work), imm(0o700))
			sys("make "+merged, unix.SYS_MKDIRAT, imm(unix.AT_FDCWD), str(merged), imm(0o755))
			sys("mount "+merged+" over the seed's", unix.SYS_MOUNT, str("overlay"), str(merged), str("overlay"), imm(unix.MS_NOSUID|unix.MS_NODEV),
				str("lowerdir="+filepath.Join(seed, d)+",upperdir="+filepath.Join(dir, d)+",workdir="+work))
		}
		p.NFiles++
	}
	bind(scratchSource(dir, "workspace", seeded), filepath.Join(root, HomeDir), false)
	bind(scratchSource(dir, "tmp", seeded), filepath.Join(root, "tmp"), false)
	// The volumes: the program's files after the image's, each attached
	// at its target.
	for i, v := range volumes {
		sys("attach the volume at "+v, unix.SYS_MOVE_MOUNT, forkexec.Arg{Kind: forkexec.ArgSlot, Index: uint32(first + i)}, str(""), imm(unix.AT_FDCWD), str(v), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
	}
	p.NFiles += len(volumes)
	// Last, after the descriptors past runsc's own were marked to close
	// at exec: its standard input again as runscTableFD, which stays.
	sys("room in runsc's descriptor table", unix.SYS_DUP3, imm(0), imm(runscTableFD), imm(0))
	return p
}

// hostDir is the host's path of dir of the sandbox ("/.", /workspace, /tmp;
// "" for the scratch tmpfs), through init's /proc/PID/root, or under
// gVisor runsc's: the container's root holds in runsc's mount namespace
// what the guest sees (scratchProg), but for /proc, /dev and /sys, which
// are the guest kernel's.
func (s *Sandbox) hostDir(dir string) string {
	if s.gv == nil {
		if dir == "" {
			dir = "/tmp"
		}
		return fmt.Sprintf("/proc/%d/root%s", s.pid, dir)
	}
	if dir == "" {
		return fmt.Sprintf("/proc/%d/root%s", s.pid, s.gv.scratch())
	}
	return fmt.Sprintf("/proc/%d/root%s%s", s.pid, s.gv.root, dir)
}

// netPid is a process in the sandbox's network namespace, for its
// /proc/PID/net: init, or under gVisor the sentry (found once).
func (s *Sandbox) netPid() int {
	if s.gv == nil {
		return s.pid
	}
	s.gv.netPidOnce.Do(func() {
		var want unix.Stat_t
		if s.netns == nil || unix.Fstat(int(s.netns.Fd()), &want) != nil {
			return
		}
		pids, err := s.group.Procs()
		if err != nil {
			return
		}
		for _, p := range pids {
			var st unix.Stat_t
			if unix.Stat("/proc/"+strconv.Itoa(p)+"/ns/net", &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
				s.gv.netPid = p
				return
			}
		}
	})
	return s.gv.netPid
}

// Prewarm readies a sandbox that will wait idle before its first command
// (a warm pool's) for that command. Under gVisor it starts the host's
// /bin/true once and sees it end: the guest kernel keeps the address
// space it made for it to reuse, and the C library's files in its
// caches, so the first command a claim brings starts about 3 ms (a
// sixth) sooner after an idle wait. The program is airlock's, from the
// host's read-only system directories, not a tenant's: it writes
// nothing, and what it used is gone when it has ended. A sandbox of an
// image is left as it is (its /bin/true is the image's, which nothing
// but a tenant's command should run), and so is one on the namespace
// backend.
func (s *Sandbox) Prewarm(ctx context.Context) error {
	if s.gv == nil || s.imageLock != nil {
		return nil
	}
	r := s.Exec(ctx, ExecRequest{Argv: []string{"/bin/true"}, KeepAlive: true, prewarm: true})
	if r.Outcome == result.Error {
		return fmt.Errorf("sandbox: prewarm: %s", r.Error)
	}
	if r.Outcome == result.LimitExceeded {
		return fmt.Errorf("sandbox: prewarm: limit exceeded: %s", r.Limit.Name)
	}
	return nil
}

// killGVisor kills the gVisor sandbox: every process in its cgroup but
// runsc itself, the sentry and the gofer and what they started (each the
// first process of a pid namespace of its own, whose death ends the rest).
// runsc, their parent, then reaps them and exits: killed with them, it
// would leave them to the host's init to reap (or to nobody, where airlock
// is a container's first process). awaitRunsc is the backstop.
func (s *Sandbox) killGVisor() {
	if s.group == nil {
		return
	}
	pids, err := s.group.Procs()
	if err != nil {
		_ = s.group.Signal()
		return
	}
	for _, p := range pids {
		if p != s.pid {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
}

// runscExitWait bounds how long a teardown waits for runsc to reap its
// killed sandbox and exit before it kills runsc too.
const runscExitWait = 5 * time.Second

// awaitRunsc waits for runsc to exit once its sandbox is killed, and
// kills it, and everything left in the cgroup, if it has not within
// runscExitWait.
func (s *Sandbox) awaitRunsc(ctx context.Context) {
	t := time.NewTimer(runscExitWait)
	defer t.Stop()
	select {
	case <-s.exited:
		return
	case <-ctx.Done():
	case <-t.C:
		s.rt.opts.Logger.Warn("runsc did not exit with its killed sandbox; killing it", "sandbox", s.id)
	}
	if rc, err := s.pidfd.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) })
	}
	_ = s.group.Signal()
}

// GVisor says whether this runtime can give sandboxes isolation gvisor,
// and why not: it finds runsc, then makes a gVisor sandbox and runs
// /bin/true in it. The answer is kept once it is yes; a no is asked again
// next time (runsc installed meanwhile, say). It returns runsc's path and
// version.
func (rt *Runtime) GVisor(ctx context.Context) (path, version string, err error) {
	rt.gvisorMu.Lock()
	defer rt.gvisorMu.Unlock()
	if path, err = rt.runsc(); err != nil {
		return "", "", err
	}
	version = gvisor.Version(path)
	if rt.gvisorOK {
		return path, version, nil
	}
	sb, err := rt.Create(ctx, Spec{Limits: DefaultLimits(), Isolation: IsolationGVisor, Label: "gvisor-check"})
	if err != nil {
		return path, version, fmt.Errorf("a gvisor sandbox could not be made with %s: %w", path, err)
	}
	r := sb.Exec(ctx, ExecRequest{Argv: []string{"/bin/true"}, Capture: true})
	derr := sb.Destroy(context.WithoutCancel(ctx))
	switch {
	case r.Outcome != result.Exited || r.ExitCode != 0:
		return path, version, fmt.Errorf("/bin/true in a gvisor sandbox: outcome %s, exit %d %s %s", r.Outcome, r.ExitCode, r.Error, r.Stderr)
	case derr != nil:
		return path, version, derr
	}
	rt.gvisorOK = true
	if pc, err := gvisor.Precompiled(path); err == nil && !pc {
		rt.opts.Logger.Warn("runsc has no precompiled seccomp programs for airlock's options: it builds its filters at every gVisor sandbox's start (35-40 ms); scripts/runsc builds one with them (docs/isolation.md)", "runsc", path)
	}
	return path, version, nil
}

// bundleDir holds the bundles of this runtime's gVisor sandboxes: one
// directory per cgroup parent, as the locks that say which are alive
// (Runtime.lockDir), so that a sweep removes only bundles whose locks it
// reads.
func (rt *Runtime) bundleDir() string {
	return filepath.Join(rt.opts.StateDir, "gvisor", filepath.Base(rt.lockDir))
}

// sweepBundles removes the bundles of gVisor sandboxes whose holder is
// gone: their lock is free. It returns how many.
func (rt *Runtime) sweepBundles() (int, error) {
	rerr := rt.sweepRoots()
	ents, err := os.ReadDir(rt.bundleDir())
	if errors.Is(err, os.ErrNotExist) {
		return 0, rerr
	}
	if err != nil {
		return 0, errors.Join(rerr, err)
	}
	errs := []error{rerr}
	n := 0
	for _, e := range ents {
		if !isSandboxID(e.Name()) {
			continue
		}
		l, err := tryLock(filepath.Join(rt.lockDir, e.Name()))
		if err != nil || l == nil {
			errs = append(errs, err)
			continue // alive, or unknown
		}
		if err := os.RemoveAll(filepath.Join(rt.bundleDir(), e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("gvisor bundle: %w", err))
		} else {
			n++
		}
		errs = append(errs, l.release())
	}
	return n, errors.Join(errs...)
}

// removeBundle removes a gVisor sandbox's directory, once its processes
// are gone (the scratch tmpfs went with runsc's mount namespace).
func (s *Sandbox) removeBundle() error {
	if s.gv == nil {
		return nil
	}
	if err := os.RemoveAll(s.gv.bundle); err != nil {
		return fmt.Errorf("gvisor bundle: %w", err)
	}
	return nil
}
