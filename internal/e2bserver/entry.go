package e2bserver

import (
	"bytes"
	"os"
	"path"
	"strconv"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
)

// How envd describes a file (its EntryInfo), built from what airlock
// reads without following a symlink.

// Bounds of describing the files of one call: the lookups resolving
// symlinks may take in all (a listing of 100,000 links, each a chain of
// 255, is not the host's to walk), and the bytes of the sandbox's
// /etc/passwd and /etc/group read to name owners.
// A file's metadata is read up to maxFileMeta bytes of names and values
// (envd's uploads set at most e2b.MaxMetadataTotal; code inside may set
// more), and a call's up to maxCallMeta: past either, the entries are
// described without it.
const (
	maxResolveSteps = 100_000
	maxIDFile       = 1 << 20
	maxFileMeta     = 16 << 10
	maxCallMeta     = 4 << 20
)

// overflowID is the id a file of an id outside the sandbox's range shows
// inside it (the kernel's overflowuid and overflowgid).
const overflowID = 65534

// describer describes the entries one call finds, inside the sandbox as
// its user (it is used within Session.InDir's function).
type describer struct {
	sb   *e2bSandbox
	root *os.File
	res  *inroot.Resolver
	// users and groups name ids, from the sandbox's /etc/passwd and
	// /etc/group, read on first need (loaded).
	users, groups map[uint32]string
	loaded        bool
	// metaLeft is what is left of maxCallMeta.
	metaLeft int
}

// inDir is Session.InDir with a describer for what fn finds.
func (sb *e2bSandbox) inDir(dir string, fn func(ws *os.File, uid int, d *describer) error) error {
	root, err := sb.s.Sandbox().OpenRoot()
	if err != nil {
		return node.ErrGone
	}
	defer root.Close()
	d := &describer{sb: sb, root: root, res: inroot.NewResolver(root, maxResolveSteps), metaLeft: maxCallMeta}
	return sb.s.InDir(dir, func(ws *os.File, uid int) error { return fn(ws, uid, d) })
}

// entryType is envd's FileType of a st_mode.
func entryType(mode uint32) string {
	e := inroot.Entry{Mode: mode}
	switch {
	case e.IsRegular():
		return "FILE_TYPE_FILE"
	case e.IsDir():
		return "FILE_TYPE_DIRECTORY"
	case e.IsSymlink():
		return "FILE_TYPE_SYMLINK"
	}
	return "FILE_TYPE_UNSPECIFIED"
}

// entry describes e, found below ws (the sandbox's directory dir), as
// envd does (filesystem.GetEntryFromPath): a symlink is described by what
// it resolves to (its type and permission bits; none when it resolves to
// nothing) with that path as its symlinkTarget, resolved inside the
// sandbox's root (inroot.Resolver), never followed by the kernel; the
// rest is the entry's own (lstat), its owner and group named as the
// sandbox names them, and its user.e2b.* attributes as its metadata.
func (d *describer) entry(ws *os.File, dir string, e inroot.Entry) e2b.EntryInfo {
	p := e2bLoc{dir: dir, rel: e.Rel}.String()
	info := e2b.EntryInfo{Name: path.Base(p), Type: entryType(e.Mode), Path: p, Size: strconv.FormatInt(e.Size, 10),
		Mode: e.Mode & 0o777, Permissions: e2b.Permissions(e.Mode), Owner: d.name(false, e.UID), Group: d.name(true, e.GID),
		ModifiedTime: e2b.Timestamp(e.ModTime)}
	if e.IsSymlink() {
		target, te, err := d.res.Resolve(p)
		if err != nil || te.IsSymlink() {
			target, info.Type, info.Mode = p, "FILE_TYPE_UNSPECIFIED", 0
		} else {
			info.Type, info.Mode = entryType(te.Mode), te.Mode&0o777
		}
		info.SymlinkTarget = &target
	}
	info.Metadata = d.metadata(ws, e.Rel)
	return info
}

// metadata is the metadata of rel below ws, within the bounds.
func (d *describer) metadata(ws *os.File, rel string) map[string]string {
	m, err := inroot.Xattrs(ws, rel, e2b.MetadataXattrPrefix, min(maxFileMeta, d.metaLeft))
	if err != nil {
		return nil
	}
	for k, v := range m {
		d.metaLeft -= len(e2b.MetadataXattrPrefix) + len(k) + len(v)
	}
	return m
}

// sandboxID is a host uid or gid of the sandbox's files as the sandbox
// sees it.
func (d *describer) sandboxID(id uint32) uint32 {
	if base := d.sb.s.Sandbox().HostIDBase(); id >= base && id-base < 65536 {
		return id - base
	}
	return overflowID
}

// name is the user (or group) name of a host id, as the sandbox's own
// /etc/passwd (or /etc/group) names it, else its number there, as envd's
// os/user lookups give it.
func (d *describer) name(group bool, id uint32) string {
	id = d.sandboxID(id)
	if !d.loaded {
		d.loaded = true
		if b, err := inroot.ReadFileIn(d.root, "/etc/passwd", maxIDFile); err == nil {
			d.users = idNames(b)
		}
		if b, err := inroot.ReadFileIn(d.root, "/etc/group", maxIDFile); err == nil {
			d.groups = idNames(b)
		}
	}
	m := d.users
	if group {
		m = d.groups
	}
	if n, ok := m[id]; ok {
		return n
	}
	return strconv.FormatUint(uint64(id), 10)
}

// idNames reads /etc/passwd or /etc/group (name:password:id:…): each id's
// name, the first line that gives it winning, as getpwuid's files lookup.
// Lines that are not of that form are passed over.
func idNames(b []byte) map[uint32]string {
	m := map[uint32]string{}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		f := bytes.SplitN(line, []byte(":"), 4)
		if len(f) < 3 || len(f[0]) == 0 || f[0][0] == '#' || f[0][0] == '+' || f[0][0] == '-' {
			continue
		}
		id, err := strconv.ParseUint(string(f[2]), 10, 32)
		if err != nil {
			continue
		}
		if _, ok := m[uint32(id)]; !ok {
			m[uint32(id)] = string(f[0])
		}
	}
	return m
}
