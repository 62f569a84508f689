package sbinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/initproto"
	"golang.org/x/sys/unix"
)

// maskedProc are /proc entries hidden from the sandbox, after runc's
// defaults: they expose kernel memory (kcore), keyrings, kernel timers and
// addresses, or hardware state that only helps an attacker. Each is a file
// unless maskedProcDirs names it; the kinds are known ahead so that masking
// costs one mount per entry and no lookup of its own (see setupProc).
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

func setup(c *initproto.Setup, fds []int) error {
	if err := validate(c, fds); err != nil {
		return err
	}
	// Nothing done from here on may propagate back to the host.
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := c.RootDir
	if err := mountTmpfs(root, "mode=0755,size=2m,nr_inodes=4096", unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	// The scratch tmpfs is mounted outside the new root, on a host
	// directory, so that it leaves with the host's tree at the pivot: no
	// unmount of its own (each costs an RCU grace period).
	scratch := c.ScratchDir
	opts := fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", c.DiskBytes, c.DiskInodes)
	if err := mountTmpfs(scratch, opts, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return fmt.Errorf("scratch: %w", err)
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
		own  bool
	}{{"workspace", 0o755, true}, {"tmp", 0o1777, false}, {"shm", 0o1777, false}} {
		p := filepath.Join(scratch, d.name)
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if d.own {
			if err := os.Chown(p, c.UID, c.GID); err != nil {
				return err
			}
		}
	}
	if c.Image != nil {
		var err error
		if root, err = imageRoot(c, root, scratch, fds[0]); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	} else {
		for _, s := range c.Symlinks {
			p := filepath.Join(root, s.Path)
			if err := mkdirAll(filepath.Dir(p)); err != nil {
				return err
			}
			if err := os.Symlink(s.Target, p); err != nil {
				return fmt.Errorf("symlink %s: %w", s.Path, err)
			}
		}
		if err := writeFiles(root, c.Files); err != nil {
			return err
		}
	}
	for _, b := range c.Binds {
		if err := bindReadOnly(b.Source, filepath.Join(root, b.Target), b.File); err != nil {
			return fmt.Errorf("bind %s: %w", b.Target, err)
		}
	}
	if err := setupDev(root, scratch, c.Devices); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := setupProc(root, scratch); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	for _, d := range []string{"workspace", "tmp"} {
		if err := bindScratch(filepath.Join(scratch, d), filepath.Join(root, d)); err != nil {
			return fmt.Errorf("/%s: %w", d, err)
		}
	}
	if err := setattr(filepath.Join(root, "dev"), unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
		return fmt.Errorf("/dev read-only: %w", err)
	}
	if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	if err := pivot(root); err != nil {
		return err
	}
	// The Go runtime opened the host's /dev/null as stdin (init starts
	// with it closed); swap in the sandbox's own, so init holds nothing of
	// the host's.
	if fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Dup3(fd, 0, 0)
		unix.Close(fd)
	}
	if c.Image == nil || !c.Image.Writable {
		if err := setattr("/", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
			return fmt.Errorf("root read-only: %w", err)
		}
	}
	if err := os.Chdir(c.Workdir); err != nil {
		return fmt.Errorf("workdir: %w", err)
	}
	return nil
}

func validate(c *initproto.Setup, fds []int) error {
	if !filepath.IsAbs(c.RootDir) || !filepath.IsAbs(c.ScratchDir) || c.DiskBytes <= 0 || c.DiskInodes <= 0 || !filepath.IsAbs(c.Workdir) {
		return errors.New("invalid setup: root, scratch, disk size, inodes and workdir are required")
	}
	if c.ScratchDir == c.RootDir || strings.HasPrefix(c.ScratchDir, strings.TrimSuffix(c.RootDir, "/")+"/") {
		return fmt.Errorf("invalid setup: scratch %q must be outside the root %q", c.ScratchDir, c.RootDir)
	}
	if want := map[bool]int{false: 0, true: 1}[c.Image != nil]; len(fds) != want {
		return fmt.Errorf("invalid setup: %d descriptors, want %d", len(fds), want)
	}
	if c.UID < 0 || c.GID < 0 || c.InitUID < 0 || c.InitUID == c.UID {
		return fmt.Errorf("invalid setup: uid %d, gid %d, init uid %d: init's must be its own", c.UID, c.GID, c.InitUID)
	}
	if c.Image != nil && strings.ContainsAny(c.RootDir, ",:\\") {
		return fmt.Errorf("invalid setup: root %q cannot be named in overlay options", c.RootDir)
	}
	for _, b := range c.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) || strings.Contains(b.Target, "..") {
			return fmt.Errorf("invalid bind %q -> %q", b.Source, b.Target)
		}
	}
	return nil
}

func mountTmpfs(dst, opts string, flags uintptr) error {
	if err := mount("tmpfs", dst, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dst, err)
	}
	return nil
}

func writeFiles(root string, files []initproto.File) error {
	for _, f := range files {
		if err := writeFile(filepath.Join(root, f.Path), []byte(f.Data), uint32(os.FileMode(f.Mode).Perm())); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	return nil
}

// imageRoot builds the root of an image sandbox below outer (the root
// tmpfs) and returns where it is: an overlay of two read-only layers, the
// image (mfd, an idmapped mount the host made) and above it a generated
// layer holding airlock's /etc files and a directory or file for every
// mount point, so nothing airlock mounts or writes lands on a path the
// image controls (an image's /proc that is a symlink, say, is hidden by
// the generated directory). A writable root adds an upper layer on the
// scratch tmpfs, under the sandbox's disk ceiling.
func imageRoot(c *initproto.Setup, outer, scratch string, mfd int) (string, error) {
	img := filepath.Join(outer, ".airlock-image")
	gen := filepath.Join(outer, ".airlock-gen")
	root := filepath.Join(outer, ".airlock-root")
	for _, d := range []string{img, gen, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, img, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("attach image: %w", err)
	}
	for _, d := range []string{"dev", "proc", "tmp", "workspace", "etc"} {
		if err := os.Mkdir(filepath.Join(gen, d), 0o755); err != nil {
			return "", err
		}
	}
	for _, b := range c.Binds {
		if err := makeTarget(filepath.Join(gen, b.Target), b.File); err != nil {
			return "", fmt.Errorf("mount point %s: %w", b.Target, err)
		}
	}
	if err := writeFiles(gen, c.Files); err != nil {
		return "", err
	}
	opts := "lowerdir=" + gen + ":" + img
	if c.Image.Writable {
		upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
		for _, d := range []string{upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return "", err
			}
		}
		opts += ",upperdir=" + upper + ",workdir=" + work + ",userxattr"
	}
	if err := mount("overlay", root, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount overlay: %w", err)
	}
	return root, nil
}

// makeTarget creates an empty directory or file to mount over, unless one
// is there already (an image root's generated layer made it). It creates
// first and looks only when that fails: on a fresh root every target is
// new, and a lookup of each first would double the calls.
func makeTarget(p string, file bool) error {
	var err error
	if file {
		var fd int
		if fd, err = createFile(p, 0o644, false); err == nil {
			return unix.Close(fd)
		}
	} else if err = mkdirAll(p); err == nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Lstat(p, &st) == nil {
		if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFLNK && (kind == unix.S_IFDIR) != file {
			return nil
		}
	}
	return err
}

// bindReadOnly binds src onto dst and makes it read-only, nosuid and nodev.
// A plain bind is tried first; a mount with submounts cannot be bound alone
// inside a user namespace (that would uncover what the submounts hide), so it
// is then bound recursively, and the flags go to every submount too.
func bindReadOnly(src, dst string, file bool) error {
	if err := makeTarget(dst, file); err != nil {
		return err
	}
	err := mount(src, dst, "", unix.MS_BIND, "")
	if err == unix.EINVAL {
		err = mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
	}
	if err != nil {
		return err
	}
	return setattr(dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true)
}

func bindScratch(src, dst string) error {
	if err := makeTarget(dst, false); err != nil {
		return err
	}
	if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return setattr(dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
}

func setupDev(root, scratch string, devices []string) error {
	dev := filepath.Join(root, "dev")
	if err := mkdirOnce(dev, 0o755); err != nil {
		return err
	}
	if err := mountTmpfs(dev, "mode=0755,size=64k,nr_inodes=64", unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
		return err
	}
	for _, d := range devices {
		p := filepath.Join(dev, d)
		if err := makeTarget(p, true); err != nil {
			return err
		}
		if err := mount(filepath.Join("/dev", d), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
		if err := setattr(p, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return fmt.Errorf("remount %s: %w", d, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	// A private devpts instance: the sandbox can open pseudo-terminals of
	// its own but sees none of the host's. There is no /dev/tty and no
	// /dev/console: commands never get a controlling terminal of the host.
	if err := mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := bindScratch(filepath.Join(scratch, "shm"), filepath.Join(dev, "shm")); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOnce makes a directory, unless an image root's generated layer
// made it already.
func mkdirOnce(p string, mode os.FileMode) error {
	err := os.Mkdir(p, mode)
	if errors.Is(err, os.ErrExist) {
		if fi, serr := os.Lstat(p); serr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

func setupProc(root, scratch string) error {
	proc := filepath.Join(root, "proc")
	if err := mkdirOnce(proc, 0o555); err != nil {
		return err
	}
	if err := mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	// Every mask is a bind of one read-only source: an empty file, or an
	// empty directory, on a tiny tmpfs made read-only once. A bind keeps
	// its source's read-only flag, so each mask costs one mount, and a
	// write fails (EROFS) rather than succeeding silently into /dev/null:
	// a command probing sysrq-trigger learns it is refused. The source
	// sits on the scratch tmpfs, outside the new root, and leaves with it
	// at the pivot.
	src := filepath.Join(scratch, "mask")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	if err := mountTmpfs(src, "mode=0555,size=4k,nr_inodes=4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
		return err
	}
	emptyFile, emptyDir := filepath.Join(src, "f"), filepath.Join(src, "d")
	if err := writeFile(emptyFile, nil, 0o444); err != nil {
		return err
	}
	if err := os.Mkdir(emptyDir, 0o555); err != nil {
		return err
	}
	if err := mount("", src, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mask source read-only: %w", err)
	}
	for _, name := range maskedProc {
		p := filepath.Join(proc, name)
		from, other := emptyFile, emptyDir
		if maskedProcDirs[name] {
			from, other = emptyDir, emptyFile
		}
		// No lookup first: an entry this kernel lacks fails the mount
		// with ENOENT, and one of the other kind (a kernel that made a
		// file a directory) with ENOTDIR, and is then bound the other way.
		err := mount(from, p, "", unix.MS_BIND, "")
		if err == unix.ENOTDIR {
			err = mount(other, p, "", unix.MS_BIND, "")
		}
		if err == unix.ENOENT {
			continue // not on this kernel
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", name, err)
		}
	}
	for _, name := range readOnlyProc {
		p := filepath.Join(proc, name)
		err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, "")
		if err == unix.ENOENT {
			continue // not on this kernel
		}
		if err != nil {
			return fmt.Errorf("bind %s: %w", name, err)
		}
		if err := setattr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true); err != nil {
			return fmt.Errorf("read-only %s: %w", name, err)
		}
	}
	return nil
}

// pivot makes root the filesystem root and detaches the old one, so no path
// inside the sandbox leads back to the host's tree (chroot would leave it
// reachable).
func pivot(root string) error {
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := pivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return os.Chdir("/")
}
