package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/linux/idmap"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/result"
)

// Volume is a writable directory of the host attached into a sandbox: the
// root of a volume's own file system (package volume), whose size bounds
// what the sandbox can write there. Its files are stored owned by the ids
// the sandbox sees (the sandbox's user is 1000 on disk too), and the
// mount shifts them onto the sandbox's host range, so one volume serves
// sandbox after sandbox whatever range each has.
type Volume struct {
	// Dir is the host directory, the root of the volume's file system.
	Dir string
	// Target is where the sandbox sees it; the rules of a Mount's target
	// apply (not in or over what airlock builds).
	Target string
	// Size is the volume's size in bytes: the ceiling a full volume is
	// reported against.
	Size int64
}

// maxVolumes bounds a spec's volumes.
const maxVolumes = 8

// checkVolumes refuses volumes that cannot be attached: a target a
// Mount could not have, two at one place, one where a mount is.
func checkVolumes(vs []Volume, ms []Mount) error {
	if len(vs) > maxVolumes {
		return fmt.Errorf("%d volumes; at most %d", len(vs), maxVolumes)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Target] = true
	}
	for _, v := range vs {
		// The host opens the directory itself (open_tree): unlike a
		// Mount's source, the sandbox's ids never look it up.
		if !filepath.IsAbs(v.Dir) || v.Size <= 0 {
			return fmt.Errorf("volume at %q: want an absolute directory and a size", v.Target)
		}
		if err := sbspec.CheckTarget(v.Target); err != nil {
			return fmt.Errorf("volume: %w", err)
		}
		if seen[v.Target] {
			return fmt.Errorf("two mounts at %q", v.Target)
		}
		seen[v.Target] = true
	}
	return nil
}

func volumeTargets(vs []Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Target)
	}
	return out
}

// mountVolume returns a detached, idmapped, writable mount of v's
// directory for the sandbox's init to attach: ids 0-65535 on disk are
// the sandbox's ids.
func (s *Sandbox) mountVolume(v Volume) (*os.File, error) {
	ns, err := s.rt.volumeNS.get(0, s.ids.base)
	if err != nil {
		return nil, err
	}
	return idmap.MountWritable(v.Dir, ns)
}

// volumeFD is an attached volume as the monitor reads it.
type volumeFD struct {
	target string
	size   int64
	fd     int // O_PATH, through init's root
}

// openVolumes opens each attached volume through init's root, for
// statfs, before any command runs (so the readings never follow a path
// the sandbox controls).
func (s *Sandbox) openVolumes(vs []Volume) error {
	for _, v := range vs {
		fd, err := unix.Open(s.hostDir(v.Target), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("open volume %s: %w", v.Target, err)
		}
		s.volumes = append(s.volumes, volumeFD{target: v.Target, size: v.Size, fd: fd})
	}
	return nil
}

// VolumeDirs are where the sandbox's volumes are attached, as it sees
// them: each, like ScratchDirs, a writable directory of its own that
// OpenDir opens.
func (s *Sandbox) VolumeDirs() []string {
	// The spec's, fixed at create: s.volumes is emptied at teardown.
	return volumeTargets(s.volumeSpec)
}

// openVolume opens the root of the volume attached at target (O_PATH)
// for the host's file calls: a new descriptor of the directory
// openVolumes opened, never a lookup of target now. While the sandbox
// is destroyed, or once it is, the call is refused (ErrDead), as
// openIn's.
func (s *Sandbox) openVolume(target string) (*os.File, error) {
	s.mu.Lock()
	if s.killed || s.pidfd == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: open %s: %w", s.id, target, ErrDead)
	}
	// Destroy's teardown, which closes the volumes' descriptors, waits
	// for the execs in flight.
	s.execs.Add(1)
	s.mu.Unlock()
	defer s.execs.Done()
	for _, v := range s.volumes {
		if v.target != target {
			continue
		}
		fd, err := unix.Openat(v.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: open %s: %w", s.id, target, err)
		}
		return os.NewFile(uintptr(fd), target), nil
	}
	return nil, fmt.Errorf("sandbox %s: open %s: not one of its volumes", s.id, target)
}

func (s *Sandbox) closeVolumes() {
	for _, v := range s.volumes {
		unix.Close(v.fd)
	}
	s.volumes = nil
}

// volumeSlack is how little may be left of a volume for it to count as
// full: a file system refuses writes with a few blocks still free (for
// its own metadata).
const volumeSlack = 256 << 10

// fullVolume is the breach of a volume written full, or nil.
func (s *Sandbox) fullVolume() *result.Limit {
	for _, v := range s.volumes {
		var st unix.Statfs_t
		if err := unix.Fstatfs(v.fd, &st); err != nil {
			continue
		}
		if int64(st.Bavail)*st.Bsize < volumeSlack || st.Ffree == 0 {
			used := int64(st.Blocks-st.Bfree) * st.Bsize
			return &result.Limit{Name: result.LimitDisk, Ceiling: v.size, Observed: used, Unit: result.UnitBytes}
		}
	}
	return nil
}
