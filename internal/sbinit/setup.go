package sbinit

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Setup is everything needed to build a sandbox before its init starts:
// what Program compiles.
type Setup struct {
	// RootDir is an empty host directory the new root is mounted over
	// (inside the sandbox's own mount namespace).
	RootDir string
	// ScratchDir is an empty host directory, outside RootDir, the scratch
	// tmpfs (the disk) is mounted over while the root is built; it leaves
	// with the host's tree at the pivot.
	ScratchDir string
	Hostname   string
	// UID and GID are the identity commands run as, inside the sandbox.
	UID int
	GID int
	// InitUID is init's own real and saved uid (its effective uid is
	// UID). It must differ from UID: the kernel then refuses every signal
	// a command sends init, by any path (kill, queued signals, pidfds,
	// F_SETOWN), since a command's ids match none of init's real and
	// saved ones.
	InitUID int
	// DiskBytes and DiskInodes size the tmpfs behind /workspace, /tmp and
	// /dev/shm.
	DiskBytes  int64
	DiskInodes int64
	Binds      []Bind
	// Volumes are where writable volumes are attached: the program takes
	// a descriptor for each, a detached idmapped mount the host made,
	// after the image's (if any). Commands may write below them.
	Volumes []string
	// Seed says the sandbox's /workspace and /tmp start with files (a
	// snapshot's): the program takes one more descriptor, after the
	// volumes', a detached read-only mount the host made of a directory
	// holding workspace/ and tmp/, and each becomes the lower layer of an
	// overlay whose upper layer is the scratch tmpfs's directory, so
	// what the sandbox changes is its own and counts against its disk
	// ceiling, and the seed is never written.
	Seed     bool
	Symlinks []Symlink
	Files    []File
	// Devices are host device nodes bound into /dev (null, zero, ...).
	Devices []string
	Rlimits []Rlimit
	// Workdir is init's working directory, and so the default one of
	// commands.
	Workdir string
	// Seccomp is the compiled filter (seccomp.Encode), compiled once by
	// the host.
	Seccomp []byte
	// Image, when set, makes the root an image instead of a tmpfs
	// holding Binds and Symlinks: Program then takes a descriptor, a
	// detached read-only mount of the image's root.
	Image *ImageRoot
	// NoSeccomp and NoLandlock exist for diagnosis only; the CLI never
	// sets them.
	NoSeccomp  bool
	NoLandlock bool
}

// Bind is a host path bound read-only into the sandbox.
type Bind struct {
	Source string
	Target string
	// File is true when the source is not a directory.
	File bool
}

// Symlink is a symlink created in the sandbox's root.
type Symlink struct {
	Target string
	Path   string
}

// File is a file generated into the sandbox's /etc.
type File struct {
	Path string
	Data string
	Mode uint32
}

// ImageRoot describes a root built from an image: an overlay whose lowest
// layer is the image and whose top layer airlock generates (Files, and the
// directories everything is mounted on), so the paths airlock controls are
// never the image's.
type ImageRoot struct {
	// Writable adds an upper layer on the sandbox's disk tmpfs, so
	// commands may change system paths; the changes are the sandbox's own
	// and count against its disk ceiling.
	Writable bool
}

// Rlimit is one resource limit applied to init and every command.
type Rlimit struct {
	Resource int
	Cur      uint64
	Max      uint64
}

// validate refuses a setup that cannot be meant.
func validate(c *Setup) error {
	if !filepath.IsAbs(c.RootDir) || !filepath.IsAbs(c.ScratchDir) || c.DiskBytes <= 0 || c.DiskInodes <= 0 || !filepath.IsAbs(c.Workdir) {
		return errors.New("invalid setup: root, scratch, disk size, inodes and workdir are required")
	}
	if c.ScratchDir == c.RootDir || strings.HasPrefix(c.ScratchDir, strings.TrimSuffix(c.RootDir, "/")+"/") {
		return fmt.Errorf("invalid setup: scratch %q must be outside the root %q", c.ScratchDir, c.RootDir)
	}
	if c.UID < 0 || c.GID < 0 || c.InitUID < 0 || c.InitUID == c.UID {
		return fmt.Errorf("invalid setup: uid %d, gid %d, init uid %d: init's must be its own", c.UID, c.GID, c.InitUID)
	}
	if c.Image != nil && strings.ContainsAny(c.RootDir, ",:\\") {
		return fmt.Errorf("invalid setup: root %q cannot be named in overlay options", c.RootDir)
	}
	if strings.ContainsAny(c.ScratchDir, ",:\\") && (c.Seed || c.Image != nil && c.Image.Writable) {
		return fmt.Errorf("invalid setup: scratch %q cannot be named in overlay options", c.ScratchDir)
	}
	for _, b := range c.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) || strings.Contains(b.Target, "..") {
			return fmt.Errorf("invalid bind %q -> %q", b.Source, b.Target)
		}
	}
	for _, v := range c.Volumes {
		if !filepath.IsAbs(v) || v == "/" || strings.Contains(v, "..") {
			return fmt.Errorf("invalid volume target %q", v)
		}
	}
	for _, s := range c.Symlinks {
		if !filepath.IsAbs(s.Path) || strings.Contains(s.Path, "..") {
			return fmt.Errorf("invalid symlink %q", s.Path)
		}
	}
	for _, f := range c.Files {
		if !filepath.IsAbs(f.Path) || strings.Contains(f.Path, "..") {
			return fmt.Errorf("invalid file %q", f.Path)
		}
	}
	for _, d := range c.Devices {
		if d == "" || strings.ContainsAny(d, "/") || d == "." || d == ".." {
			return fmt.Errorf("invalid device %q", d)
		}
	}
	return nil
}
