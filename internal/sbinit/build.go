package sbinit

import (
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/linux/landlock"
	"golang.org/x/sys/unix"
)

// maskedProc are /proc entries hidden from the sandbox, after runc's
// defaults: they expose kernel memory (kcore), keyrings, kernel timers and
// addresses, or hardware state that only helps an attacker. Each is a file
// unless maskedProcDirs names it; the kinds are known ahead, so masking
// costs one mount per entry and no lookup of its own.
var maskedProc = []string{
	"acpi", "asound", "interrupts", "kcore", "keys", "latency_stats",
	"timer_list", "timer_stats", "sched_debug", "scsi", "kmsg",
	"kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "pagetypeinfo",
	"slabinfo", "vmallocinfo", "sysrq-trigger", "config.gz",
}

var maskedProcDirs = map[string]bool{"acpi": true, "asound": true, "scsi": true}

// readOnlyProc are /proc entries the sandbox may read but never write:
// kernel tunables (/proc/sys) and hardware interfaces.
var readOnlyProc = []string{"bus", "fs", "irq", "sys", "driver", "tty"}

// ProcMasks lists the /proc entries a sandbox masks (dirs says which are
// directories) and those it binds read-only, for a peer that is to take
// the same steps (the benchmark's).
func ProcMasks() (masked []string, dirs map[string]bool, readOnly []string) {
	return slices.Clone(maskedProc), maps.Clone(maskedProcDirs), slices.Clone(readOnlyProc)
}

// Program compiles c into the program the clone of a sandbox's init runs
// before it execs init (see forkexec.Prog): it builds the sandbox's file
// system in its new mount namespace, a new root on tmpfs (or an image's),
// read-only binds, a generated /etc, /proc with sensitive entries masked
// or read-only, a minimal /dev, a size-limited scratch tmpfs for
// /workspace, /tmp and /dev/shm, pivots into it and detaches the host's
// tree; then it drops everything init and the commands will never need:
// capabilities (the bounding set included), uid and gid 0, rlimits,
// Landlock and the seccomp allowlist, which the commands inherit from
// init; no_new_privs is init's first act after the exec (see confine).
//
// The program runs as uid 0 of the sandbox's user namespace and leaves the
// child with init's ids: real and saved uid InitUID, effective uid UID
// (exec then makes the saved one UID too, and init sets it back, see
// run). Nothing in it allocates or waits: it is bubblewrap's way, so that
// init itself, a Go program whose every thread would otherwise have to be
// confined one by one, starts confined.
//
// With c.Image, the program takes one file (slot 0): the image's mount.
// The program grants Landlock's rights to run the file the child execs,
// the init program, which lies outside the new root: the child opened it
// (forkexec.Spec.PathFile) before its clone.
func Program(c *Setup) (*forkexec.Prog, error) {
	if err := validate(c); err != nil {
		return nil, err
	}
	b := newBuilder()
	if c.Image != nil {
		b.p.NFiles = 1 // the image's mount
	}
	b.p.NFiles += len(c.Volumes) // the volumes' mounts
	if c.Seed {
		b.p.NFiles++ // the seed's mount
	}
	b.slot = b.p.FirstSave()
	b.build(c)
	if b.err != nil {
		return nil, b.err
	}
	return &b.p, nil
}

// builder assembles a program. It keeps a model of the tree it builds
// (made: path → is a directory), so that it makes every directory once,
// parents first, and needs no lookups at run time.
type builder struct {
	p    forkexec.Prog
	strs map[string]uint32
	made map[string]bool
	// under holds every directory the model has something below.
	under map[string]bool
	// attrs are the struct mount_attr blobs made, by flags.
	attrs map[uint64]forkexec.Arg
	slot  int8 // the next free slot
	empty forkexec.Arg
	// err is the first path the model could not make (a file in the
	// way of a directory).
	err error
}

func newBuilder() *builder {
	b := &builder{strs: make(map[string]uint32, 160), made: make(map[string]bool, 64), under: make(map[string]bool, 32), attrs: map[uint64]forkexec.Arg{}}
	// A program is about 250 ops and 150 blobs: room for them at once
	// (appending one by one copied the ops over and over).
	b.p.Ops = make([]forkexec.Op, 0, 320)
	b.p.Blobs = make([][]byte, 0, 192)
	b.empty = b.str("")
	return b
}

// Argument helpers.

func imm(v uint64) forkexec.Arg { return forkexec.Arg{Kind: forkexec.ArgImm, Imm: v} }

func immInt(v int) forkexec.Arg { return imm(uint64(int64(v))) }

var (
	atFDCWD = immInt(unix.AT_FDCWD)
	null    = imm(0)
	exe     = forkexec.Arg{Kind: forkexec.ArgExe}
)

func slotArg(s int8) forkexec.Arg { return forkexec.Arg{Kind: forkexec.ArgSlot, Index: uint32(s)} }

// str is a NUL-terminated string, stored once however often it is named.
func (b *builder) str(s string) forkexec.Arg {
	i, ok := b.strs[s]
	if !ok {
		b.p.Blobs = append(b.p.Blobs, append([]byte(s), 0))
		i = uint32(len(b.p.Blobs) - 1)
		b.strs[s] = i
	}
	return forkexec.Arg{Kind: forkexec.ArgBlob, Index: i}
}

// data is raw bytes.
func (b *builder) data(d []byte) forkexec.Arg {
	b.p.Blobs = append(b.p.Blobs, d)
	return forkexec.Arg{Kind: forkexec.ArgBlob, Index: uint32(len(b.p.Blobs) - 1)}
}

// sys appends one system call and returns its index.
func (b *builder) sys(what string, trap uintptr, args ...forkexec.Arg) int {
	op := forkexec.Op{Trap: trap, Save: forkexec.NoSave, What: what}
	copy(op.Args[:], args)
	b.p.Ops = append(b.p.Ops, op)
	return len(b.p.Ops) - 1
}

// save makes op i keep its result (a descriptor) in a new slot.
func (b *builder) save(i int) int8 {
	s := b.slot
	b.slot++
	b.p.Ops[i].Save = s
	return s
}

// orSkip makes op i, on errno e, skip n ops and go on.
func (b *builder) orSkip(i int, e unix.Errno, n int) {
	op := &b.p.Ops[i]
	for k := range op.Else {
		if op.Else[k].Errno == 0 {
			op.Else[k] = forkexec.Branch{Errno: e, Skip: uint8(n)}
			return
		}
	}
	panic("sbinit: more than two branches on one op")
}

// Mounts.

func (b *builder) mount(what, src, dst, fstype string, flags uintptr, data string) int {
	d := null
	if data != "" {
		d = b.str(data)
	}
	t := null
	if fstype != "" {
		t = b.str(fstype)
	}
	return b.sys(what, unix.SYS_MOUNT, b.str(src), b.str(dst), t, imm(uint64(flags)), d)
}

// tmpfs mounts a fresh tmpfs on dst, a directory whose content it hides.
func (b *builder) tmpfs(what, dst, opts string, flags uintptr) {
	b.mount(what, "tmpfs", dst, "tmpfs", flags, opts)
	b.covered(dst)
}

// setattr sets mount flags (unix.MOUNT_ATTR_*) on the mount at p, and with
// recursive on every mount below it, leaving its other flags as they are:
// one mount_setattr (Linux 5.12). A remount instead needs a statfs first,
// to repeat the flags the kernel locked on mounts that came from the host,
// and one call per submount.
func (b *builder) setattr(what, p string, attr uint64, recursive bool) int {
	flags := uint64(unix.AT_SYMLINK_NOFOLLOW)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	// struct mount_attr: attr_set, attr_clr, propagation, userns_fd.
	a, ok := b.attrs[attr]
	if !ok {
		a = b.data(u64s(attr, 0, 0, 0))
		b.attrs[attr] = a
	}
	return b.sys(what, unix.SYS_MOUNT_SETATTR, atFDCWD, b.str(p), imm(flags), a, imm(32))
}

// u64s packs a struct of 64-bit fields.
func u64s(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.NativeEndian.AppendUint64(b, x)
	}
	return b
}

// covered forgets what the model knew below p, now hidden by a mount.
func (b *builder) covered(p string) {
	if b.under[p] {
		for q := range b.made {
			if strings.HasPrefix(q, p+"/") {
				delete(b.made, q)
				delete(b.under, q)
			}
		}
		delete(b.under, p)
	}
	b.record(p, true)
}

// record puts p in the model, a directory or not.
func (b *builder) record(p string, dir bool) {
	b.made[p] = dir
	for d := filepath.Dir(p); d != p && !b.under[d]; p, d = d, filepath.Dir(d) {
		b.under[d] = true
	}
}

// Files and directories.

// mkdir makes directory p with mode (the umask applies) and records it.
func (b *builder) mkdir(p string, mode uint32) {
	b.sys("make "+p, unix.SYS_MKDIRAT, atFDCWD, b.str(p), imm(uint64(mode)))
	b.record(p, true)
}

// mkdirAll makes p and whatever parents the model lacks, mode 0755.
func (b *builder) mkdirAll(p string) {
	if dir, ok := b.made[p]; ok {
		if !dir && b.err == nil {
			b.err = fmt.Errorf("invalid setup: %s is a file or symlink, and a directory is needed there", p)
		}
		return
	}
	if parent := filepath.Dir(p); parent != p {
		b.mkdirAll(parent)
	}
	b.mkdir(p, 0o755)
}

// writeFile creates (or truncates) file p with perm and writes data.
func (b *builder) writeFile(p string, data []byte, perm uint32) {
	b.mkdirAll(filepath.Dir(p))
	open := b.sys("create "+p, unix.SYS_OPENAT, atFDCWD, b.str(p), imm(unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC), imm(uint64(perm)))
	fd := b.save(open)
	if len(data) > 0 {
		w := b.sys("write "+p, unix.SYS_WRITE, slotArg(fd), b.data(data), imm(uint64(len(data))))
		b.p.Ops[w].Whole = true
	}
	b.sys("close "+p, unix.SYS_CLOSE, slotArg(fd))
	b.record(p, false)
}

// makeTarget creates an empty directory or file to mount over, unless the
// model has one there already (an image root's generated layer made it).
func (b *builder) makeTarget(p string, file bool) {
	if dir, ok := b.made[p]; ok && dir == !file {
		return
	}
	if file {
		b.writeFile(p, nil, 0o644)
	} else {
		b.mkdirAll(p)
	}
}

// bindReadOnly binds src onto dst and makes it read-only, nosuid and nodev.
// A plain bind is tried first; a mount with submounts cannot be bound alone
// inside a user namespace (that would uncover what the submounts hide), so
// it is then bound recursively, and the flags go to every submount too.
func (b *builder) bindReadOnly(src, dst string, file bool) {
	b.makeTarget(dst, file)
	plain := b.mount("bind "+src+" on "+dst, src, dst, "", unix.MS_BIND, "")
	b.p.Ops[plain].Skip = 1
	b.orSkip(plain, unix.EINVAL, 0)
	b.mount("bind "+src+" and its submounts on "+dst, src, dst, "", unix.MS_BIND|unix.MS_REC, "")
	b.setattr("make "+dst+" read-only", dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true)
	if !file {
		b.covered(dst)
	}
}

// seed mounts the workspace and /tmp as overlays: the seed (the
// program's file slot, attached on the scratch tmpfs, which leaves with
// the host's tree at the pivot) below, the scratch tmpfs's own
// directories above. userxattr: the overlay is the sandbox's user
// namespace's, and keeps its own records in user.* attributes of the
// upper layer (the host checks that its tmpfs holds them).
func (b *builder) seed(root, scratch string, slot int8) {
	seed := filepath.Join(scratch, ".seed")
	b.mkdir(seed, 0o700)
	b.sys("attach the seed", unix.SYS_MOVE_MOUNT, slotArg(slot), b.empty, atFDCWD, b.str(seed), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
	for _, d := range []string{"workspace", "tmp"} {
		work := filepath.Join(scratch, ".work-"+d)
		b.mkdir(work, 0o700)
		dst := filepath.Join(root, d)
		b.makeTarget(dst, false)
		opts := "lowerdir=" + filepath.Join(seed, d) + ",upperdir=" + filepath.Join(scratch, d) + ",workdir=" + work + ",userxattr"
		b.mount("mount "+dst+" over the seed's", "overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
		b.covered(dst)
	}
}

// bindScratch binds a directory of the scratch tmpfs onto dst.
func (b *builder) bindScratch(src, dst string) {
	b.makeTarget(dst, false)
	b.mount("bind "+dst, src, dst, "", unix.MS_BIND, "")
	b.setattr("make "+dst+" nosuid", dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
	b.covered(dst)
}

// build appends the whole setup.
func (b *builder) build(c *Setup) {
	// While it builds the sandbox, the child dies with the thread that
	// cloned it. The uid change at the end clears this; from then on
	// init's life is bound to the host by its control channel, whose end
	// of file ends it.
	b.sys("set the parent-death signal", unix.SYS_PRCTL, imm(unix.PR_SET_PDEATHSIG), imm(uint64(unix.SIGKILL)))
	// The umask is inherited from whoever started airlock, and a strict
	// one (077) would make the generated /etc and the workspace unusable
	// to the sandbox's user; init and the commands keep 022.
	b.sys("set the umask", unix.SYS_UMASK, imm(0o022))
	// Nothing done from here on may propagate back to the host.
	b.mount("make mounts private", "", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	root, scratch := c.RootDir, c.ScratchDir
	b.tmpfs("mount the root tmpfs", root, "mode=0755,size=2m,nr_inodes=4096", unix.MS_NOSUID|unix.MS_NODEV)
	// The scratch tmpfs is mounted outside the new root, on a host
	// directory, so that it leaves with the host's tree at the pivot: no
	// unmount of its own (each costs an RCU grace period).
	b.tmpfs("mount the disk tmpfs", scratch, fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", c.DiskBytes, c.DiskInodes), unix.MS_NOSUID|unix.MS_NODEV)
	for _, d := range []struct {
		name string
		mode uint32
		own  bool
	}{{"workspace", 0o755, true}, {"tmp", 0o1777, false}, {"shm", 0o1777, false}} {
		p := filepath.Join(scratch, d.name)
		b.mkdir(p, d.mode)
		b.sys("chmod "+p, unix.SYS_FCHMODAT, atFDCWD, b.str(p), imm(uint64(d.mode)))
		if d.own {
			b.sys("chown "+p, unix.SYS_FCHOWNAT, atFDCWD, b.str(p), immInt(c.UID), immInt(c.GID), imm(0))
		}
	}
	if c.Image != nil {
		root = b.imageRoot(c, root, scratch)
	} else {
		for _, s := range c.Symlinks {
			p := filepath.Join(root, s.Path)
			b.mkdirAll(filepath.Dir(p))
			b.sys("symlink "+s.Path, unix.SYS_SYMLINKAT, b.str(s.Target), atFDCWD, b.str(p))
			b.record(p, false)
		}
		b.writeFiles(root, c.Files)
	}
	for _, bd := range c.Binds {
		b.bindReadOnly(bd.Source, filepath.Join(root, bd.Target), bd.File)
	}
	first := int8(0)
	if c.Image != nil {
		first = 1
	}
	for i, v := range c.Volumes {
		dst := filepath.Join(root, v)
		b.makeTarget(dst, false)
		b.sys("attach the volume at "+v, unix.SYS_MOVE_MOUNT, slotArg(first+int8(i)), b.empty, atFDCWD, b.str(dst), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
		b.covered(dst)
	}
	b.dev(root, scratch, c.Devices)
	b.proc(root, scratch)
	if c.Seed {
		b.seed(root, scratch, first+int8(len(c.Volumes)))
	} else {
		for _, d := range []string{"workspace", "tmp"} {
			b.bindScratch(filepath.Join(scratch, d), filepath.Join(root, d))
		}
	}
	b.setattr("make /dev read-only", filepath.Join(root, "dev"), unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false)
	b.sys("set the host name", unix.SYS_SETHOSTNAME, b.str(c.Hostname), imm(uint64(len(c.Hostname))))
	// The new root becomes the root, and the old one is detached, so no
	// path inside the sandbox leads back to the host's tree (chroot would
	// leave it reachable).
	b.sys("enter the new root", unix.SYS_CHDIR, b.str(root))
	b.sys("pivot_root", unix.SYS_PIVOT_ROOT, b.str("."), b.str("."))
	b.sys("detach the host's tree", unix.SYS_UMOUNT2, b.str("."), imm(unix.MNT_DETACH))
	b.sys("enter /", unix.SYS_CHDIR, b.str("/"))
	// Init's stdin is the sandbox's own /dev/null: it holds nothing of
	// the host's. Descriptor 0 is closed (the clone's Files say so), so
	// the open lands there, which the dup then finds (EINVAL: the same
	// descriptor) and leaves; on any other it moves there.
	devnull := b.save(b.sys("open /dev/null", unix.SYS_OPENAT, atFDCWD, b.str("/dev/null"), imm(unix.O_RDONLY), imm(0)))
	dup := b.sys("make /dev/null init's stdin", unix.SYS_DUP3, slotArg(devnull), imm(0), imm(0))
	b.orSkip(dup, unix.EINVAL, 1)
	b.sys("close /dev/null", unix.SYS_CLOSE, slotArg(devnull))
	if c.Image == nil || !c.Image.Writable {
		b.setattr("make / read-only", "/", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
	}
	b.sys("enter the working directory "+c.Workdir, unix.SYS_CHDIR, b.str(c.Workdir))
	b.confine(c)
}

func (b *builder) writeFiles(root string, files []File) {
	for _, f := range files {
		b.writeFile(filepath.Join(root, f.Path), []byte(f.Data), uint32(os.FileMode(f.Mode).Perm()))
	}
}

// imageRoot builds the root of an image sandbox below outer (the root
// tmpfs) and returns where it is: an overlay of two read-only layers, the
// image (the program's file 0, an idmapped mount the host made) and above
// it a generated layer holding airlock's /etc files and a directory or
// file for every mount point, so nothing airlock mounts or writes lands
// on a path the image controls (an image's /proc that is a symlink, say,
// is hidden by the generated directory). A writable root adds an upper
// layer on the scratch tmpfs, under the sandbox's disk ceiling.
func (b *builder) imageRoot(c *Setup, outer, scratch string) string {
	img := filepath.Join(outer, ".airlock-image")
	gen := filepath.Join(outer, ".airlock-gen")
	root := filepath.Join(outer, ".airlock-root")
	for _, d := range []string{img, gen, root} {
		b.mkdir(d, 0o755)
	}
	b.sys("attach the image", unix.SYS_MOVE_MOUNT, slotArg(0), b.empty, atFDCWD, b.str(img), imm(unix.MOVE_MOUNT_F_EMPTY_PATH))
	for _, d := range []string{"dev", "proc", "tmp", "workspace", "etc"} {
		b.mkdir(filepath.Join(gen, d), 0o755)
	}
	for _, bd := range c.Binds {
		b.makeTarget(filepath.Join(gen, bd.Target), bd.File)
	}
	for _, v := range c.Volumes {
		b.makeTarget(filepath.Join(gen, v), false)
	}
	b.writeFiles(gen, c.Files)
	opts := "lowerdir=" + gen + ":" + img
	if c.Image.Writable {
		upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
		b.mkdir(upper, 0o755)
		b.mkdir(work, 0o755)
		opts += ",upperdir=" + upper + ",workdir=" + work + ",userxattr"
	}
	b.mount("mount the image's overlay", "overlay", root, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	if c.Image.Writable {
		b.keepUpper(filepath.Join(scratch, "upper"))
	}
	// The merged root shows the generated layer's paths (and the
	// image's, which the model does not know and never needs).
	b.record(root, true)
	for p, dir := range b.made {
		if rel, ok := strings.CutPrefix(p, gen+"/"); ok {
			b.record(filepath.Join(root, rel), dir)
		}
	}
	return root
}

// keepUpper leaves init a descriptor of the writable root's upper layer,
// for the host: a disk breach's post-mortem walks it (see the sandbox
// package's openUpper). The layer lies on the scratch tmpfs outside the
// new root, which no path of the host's reaches once the root is pivoted
// and the host's tree detached. The descriptor is an O_PATH one, moved to 4 or above (0 is
// kept free for init's stdin) and not close-on-exec, so it is the one
// descriptor init holds past the exec beyond 0 to 3. Commands never
// inherit it (init starts each with exactly its own three or a
// terminal), and cannot reach it through /proc/1/fd (init is not
// dumpable).
func (b *builder) keepUpper(upper string) {
	fd := b.save(b.sys("open the root's upper layer", unix.SYS_OPENAT, atFDCWD, b.str(upper), imm(unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW), imm(0)))
	b.sys("keep the upper layer for the host", unix.SYS_FCNTL, slotArg(fd), imm(unix.F_DUPFD), imm(UpperDirMinFD))
	b.sys("close the first descriptor of the upper layer", unix.SYS_CLOSE, slotArg(fd))
}

// UpperDirMinFD is the lowest descriptor number init may hold the
// writable root's upper layer at (see keepUpper): its control channel is
// 3.
const UpperDirMinFD = 4

// PtyMax bounds the pseudo-terminals one sandbox may hold open (devpts
// max=). The kernel has one count for all devpts instances but the
// host's (kernel.pty.max, 4,096, less kernel.pty.reserve, 1,024, kept
// for the host's own instance): without a bound one sandbox opened 3,071
// and left none for any other. 3,072 / 32 = 96 sandboxes at their bound
// before a sandbox is refused one; the host's own are never touched.
const PtyMax = 32

func (b *builder) dev(root, scratch string, devices []string) {
	dev := filepath.Join(root, "dev")
	b.makeTarget(dev, false)
	b.tmpfs("mount /dev", dev, "mode=0755,size=64k,nr_inodes=64", unix.MS_NOSUID|unix.MS_NOEXEC)
	for _, d := range devices {
		p := filepath.Join(dev, d)
		b.makeTarget(p, true)
		b.mount("bind /dev/"+d, filepath.Join("/dev", d), p, "", unix.MS_BIND, "")
		b.setattr("make /dev/"+d+" nosuid", p, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false)
	}
	pts := filepath.Join(dev, "pts")
	b.mkdir(pts, 0o755)
	// A private devpts instance: the sandbox can open pseudo-terminals of
	// its own but sees none of the host's. There is no /dev/tty and no
	// /dev/console: commands never get a controlling terminal of the host.
	b.mount("mount /dev/pts", "devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,max=%d", PtyMax))
	b.covered(pts)
	b.bindScratch(filepath.Join(scratch, "shm"), filepath.Join(dev, "shm"))
	for _, l := range [][2]string{
		{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	} {
		p := filepath.Join(dev, l[0])
		b.sys("symlink /dev/"+l[0], unix.SYS_SYMLINKAT, b.str(l[1]), atFDCWD, b.str(p))
		b.record(p, false)
	}
}

func (b *builder) proc(root, scratch string) {
	proc := filepath.Join(root, "proc")
	if _, ok := b.made[proc]; !ok {
		b.mkdir(proc, 0o555)
	}
	b.mount("mount /proc", "proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	b.covered(proc)
	// Every mask is a bind of one read-only source: an empty file, or an
	// empty directory, on a tiny tmpfs made read-only once. A bind keeps
	// its source's read-only flag, so each mask costs one mount, and a
	// write fails (EROFS) rather than succeeding silently into /dev/null:
	// a command probing sysrq-trigger learns it is refused. The source
	// sits on the scratch tmpfs, outside the new root, and leaves with it
	// at the pivot.
	src := filepath.Join(scratch, "mask")
	b.mkdir(src, 0o755)
	b.tmpfs("mount the masks' tmpfs", src, "mode=0555,size=4k,nr_inodes=4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
	emptyFile, emptyDir := filepath.Join(src, "f"), filepath.Join(src, "d")
	b.writeFile(emptyFile, nil, 0o444)
	b.mkdir(emptyDir, 0o555)
	b.mount("make the masks read-only", "", src, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	for _, name := range maskedProc {
		p := filepath.Join(proc, name)
		from, other := emptyFile, emptyDir
		if maskedProcDirs[name] {
			from, other = emptyDir, emptyFile
		}
		// No lookup first: an entry this kernel lacks fails the mount
		// with ENOENT (and is skipped), and one of the other kind (a
		// kernel that made a file a directory) with ENOTDIR, and is
		// then bound the other way.
		first := b.mount("mask /proc/"+name, from, p, "", unix.MS_BIND, "")
		b.p.Ops[first].Skip = 1
		b.orSkip(first, unix.ENOTDIR, 0)
		b.orSkip(first, unix.ENOENT, 1)
		second := b.mount("mask /proc/"+name+" (the other kind)", other, p, "", unix.MS_BIND, "")
		b.orSkip(second, unix.ENOENT, 0)
	}
	for _, name := range readOnlyProc {
		p := filepath.Join(proc, name)
		bind := b.mount("bind /proc/"+name, p, p, "", unix.MS_BIND|unix.MS_REC, "")
		b.orSkip(bind, unix.ENOENT, 1) // not on this kernel
		b.setattr("make /proc/"+name+" read-only", p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true)
	}
}

// Securebits from linux/securebits.h.
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// maxCap bounds the capabilities dropped from the bounding set: every one
// the kernel knows (the first it does not answers EINVAL, and ends the
// drops).
const maxCap = 64

// confine drops everything init and the commands will never need. Order
// matters: the bounding set and securebits need CAP_SETPCAP, Landlock
// without no_new_privs CAP_SYS_ADMIN, so they go before the uid change;
// the rlimits after every open; seccomp goes last because it refuses
// calls made before it.
func (b *builder) confine(c *Setup) {
	// With these bits, uid 0 inside is not special to the kernel: exec
	// grants no capabilities and nothing can be re-enabled.
	bits := uint64(secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup |
		secbitNoSetuidFixupLocked | secbitKeepCapsLocked |
		secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked)
	b.sys("set securebits", unix.SYS_PRCTL, imm(unix.PR_SET_SECUREBITS), imm(bits))
	// The bounding set caps what any later exec could ever gain.
	for capNr := 0; capNr < maxCap; capNr++ {
		i := b.sys("drop a capability from the bounding set", unix.SYS_PRCTL, imm(unix.PR_CAPBSET_DROP), imm(uint64(capNr)))
		b.orSkip(i, unix.EINVAL, maxCap-1-capNr) // past the kernel's last
	}
	b.sys("clear ambient capabilities", unix.SYS_PRCTL, imm(unix.PR_CAP_AMBIENT), imm(unix.PR_CAP_AMBIENT_CLEAR_ALL))
	// Landlock before the uid change, while the child holds
	// CAP_SYS_ADMIN in its user namespace, with which the kernel needs
	// no no_new_privs for it.
	if !c.NoLandlock {
		b.landlock(c)
	}
	// Init keeps a real and saved uid of its own (InitUID) with the
	// commands' uid as its effective one: every command gets UID as all
	// three (see server.start), and then matches none of init's real and
	// saved uids, so the kernel refuses any signal it sends init (kill,
	// tgkill, queued signals with forged codes, pidfds, F_SETOWN).
	// Otherwise a command could kill init with a signal the Go runtime
	// takes for a fault of its own. Supplementary groups were cleared at
	// the clone.
	b.sys("setresgid", unix.SYS_SETRESGID, immInt(c.GID), immInt(c.GID), immInt(c.GID))
	b.sys("setresuid", unix.SYS_SETRESUID, immInt(c.InitUID), immInt(c.UID), immInt(c.InitUID))
	// The rlimits come last but for seccomp: until its exec the child
	// holds a copy of the host's descriptors (close-on-exec), often more
	// than the sandbox may have, and with RLIMIT_NOFILE set first the
	// program's own opens (Landlock's) would fail with EMFILE.
	for _, r := range c.Rlimits {
		// struct rlimit64: cur, max.
		b.sys(fmt.Sprintf("set rlimit %d", r.Resource), unix.SYS_PRLIMIT64, imm(0), immInt(r.Resource), b.data(u64s(r.Cur, r.Max)), null)
	}
	// No no_new_privs before the exec: the kernel (6.1 does; 6.18 no longer)
	// takes an exec under it whose effective uid differs from the real
	// one for a set-uid exec and resets the effective uid to the real
	// one, so init would start with its own uid as both. Init sets it
	// on all its threads first thing after the exec, before any command
	// exists (see run). Seccomp without it needs CAP_SYS_ADMIN, which the
	// child keeps until the exec; the inheritable set, the one a file's
	// inheritable capabilities could combine with, goes now. The exec
	// then leaves init none: uid 0 is not special (SECBIT_NOROOT), the
	// bounding and ambient sets are empty, and init's file has no
	// capabilities. Init checks that it has none.
	// struct __user_cap_header_struct (version, pid 0: this process),
	// then two struct __user_cap_data_struct (effective, permitted,
	// inheritable; capabilities 0–31, then 32–63).
	hdr := binary.NativeEndian.AppendUint32(nil, unix.LINUX_CAPABILITY_VERSION_3)
	hdr = binary.NativeEndian.AppendUint32(hdr, 0)
	caps := make([]byte, 2*3*4)
	if !c.NoSeccomp {
		keep := uint32(1) << unix.CAP_SYS_ADMIN
		binary.NativeEndian.PutUint32(caps[0:], keep) // effective
		binary.NativeEndian.PutUint32(caps[4:], keep) // permitted
	}
	b.sys("clear capabilities", unix.SYS_CAPSET, b.data(hdr), b.data(caps))
	if !c.NoSeccomp {
		b.p.Ops = append(b.p.Ops, forkexec.Op{Trap: forkexec.TrapSeccomp, Args: [6]forkexec.Arg{b.data(c.Seccomp)}, Save: forkexec.NoSave, What: "install the seccomp filter"})
	}
}

// landlock restricts the child, and so init and every command, to reading
// and executing the root, writing the scratch directories, and using the
// devices; plus running the init program, which lies outside the root.
func (b *builder) landlock(c *Setup) {
	rs := landlock.NewRuleset()
	if rs.ABI == 0 {
		return // no Landlock on this kernel
	}
	rw := append([]string{"/workspace", "/tmp", "/dev/shm"}, c.Volumes...)
	if c.Image != nil && c.Image.Writable {
		// The root's upper layer is the sandbox's own, on its disk
		// tmpfs; /dev and /proc keep their read-only mounts.
		rw = []string{"/"}
	}
	type rule struct {
		path string
		kind uint64
		dir  bool
	}
	rules := []rule{{"/", landlock.ReadOnly, true}}
	for _, p := range rw {
		rules = append(rules, rule{p, landlock.ReadWrite, true})
	}
	for _, d := range c.Devices {
		rules = append(rules, rule{"/dev/" + d, landlock.WriteFiles, false})
	}
	rules = append(rules, rule{"/dev/pts", landlock.WriteFiles, true})
	set := b.save(b.sys("create the Landlock ruleset", unix.SYS_LANDLOCK_CREATE_RULESET, b.data(rs.Attr), imm(uint64(len(rs.Attr))), imm(0)))
	fd := b.slot // one slot for every rule's descriptor in turn
	b.slot++
	for _, r := range rules {
		rights := rs.Rights(r.kind, r.dir)
		if rights == 0 {
			continue
		}
		open := b.sys("open "+r.path+" for a Landlock rule", unix.SYS_OPENAT, atFDCWD, b.str(r.path), imm(unix.O_PATH|unix.O_CLOEXEC), imm(0))
		b.p.Ops[open].Save = fd
		b.p.Ops = append(b.p.Ops, forkexec.Op{Trap: forkexec.TrapLandlockRule, Args: [6]forkexec.Arg{slotArg(set), imm(rights), slotArg(fd)}, Save: forkexec.NoSave, What: "add a Landlock rule for " + r.path})
		b.sys("close "+r.path, unix.SYS_CLOSE, slotArg(fd))
	}
	if rights := rs.Rights(landlock.Exec, false); rights != 0 {
		b.p.Ops = append(b.p.Ops, forkexec.Op{Trap: forkexec.TrapLandlockRule, Args: [6]forkexec.Arg{slotArg(set), imm(rights), exe}, Save: forkexec.NoSave, What: "add a Landlock rule for the init program"})
	}
	b.sys("restrict to the Landlock ruleset", unix.SYS_LANDLOCK_RESTRICT_SELF, slotArg(set), imm(0))
	b.sys("close the Landlock ruleset", unix.SYS_CLOSE, slotArg(set))
}
