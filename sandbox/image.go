package sandbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/sbinit"
	"github.com/airlockhq/airlock/internal/sbspec"
	"golang.org/x/sys/unix"
)

// Identity of commands inside the sandbox. Init maps ids 0..idRange-1 of
// the sandbox onto the sandbox's private host range.
const (
	sandboxUID = 1000
	sandboxGID = 1000
	// HomeDir is also the default working directory.
	HomeDir = sbspec.HomeDir
)

// DefaultEnv is what every command gets unless the caller overrides a
// name. Nothing of the caller's own environment is ever passed in.
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + HomeDir,
	"LANG=C.UTF-8",
	"TERM=dumb",
}

// hostImage describes the embedded default image "host": the host's own
// system directories, read-only, and a generated /etc that holds nothing
// of the host's but the loader cache and the CA certificates.
type hostImage struct {
	binds    []sbinit.Bind
	symlinks []sbinit.Symlink
	devices  []string
}

// hostDirs are bound from the host when present. Where the host has a
// symlink instead (merged /usr), the same symlink is created.
var hostDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtc are the only host /etc entries a sandbox sees: the dynamic loader
// cache (so programs start) and the CA certificates (so TLS verifies).
var hostEtc = []string{
	"/etc/ld.so.cache",
	"/etc/ssl/certs",
	"/etc/ssl/cert.pem",
	"/etc/pki/tls/certs",
	"/etc/pki/ca-trust/extracted",
}

func loadHostImage() (*hostImage, error) {
	img := &hostImage{devices: []string{"null", "zero", "full", "random", "urandom"}}
	for _, d := range hostDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("image host: %w", err)
			}
			img.symlinks = append(img.symlinks, sbinit.Symlink{Target: target, Path: d})
		case fi.IsDir():
			img.binds = append(img.binds, sbinit.Bind{Source: d, Target: d})
		}
	}
	if len(img.binds) == 0 {
		return nil, fmt.Errorf("image host: none of %s is a directory", strings.Join(hostDirs, ", "))
	}
	for _, p := range hostEtc {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		img.binds = append(img.binds, sbinit.Bind{Source: p, Target: p, File: !fi.IsDir()})
	}
	// Debian-style /etc/alternatives is a directory of symlinks into /usr
	// that many commands (awk, editor, ...) resolve through. It is bound
	// read-only only while it holds nothing but symlinks, so no host file
	// behind /etc is ever exposed (Debian's own README there excepted);
	// otherwise the sandbox goes without it.
	if onlyLinks("/etc/alternatives") {
		img.binds = append(img.binds, sbinit.Bind{Source: "/etc/alternatives", Target: "/etc/alternatives"})
	}
	for _, d := range img.devices {
		if _, err := os.Stat(filepath.Join("/dev", d)); err != nil {
			return nil, fmt.Errorf("image host: /dev/%s: %w", d, err)
		}
	}
	return img, nil
}

// onlyLinks reports whether dir exists, holds something, and holds only
// symlinks and a regular file named README. It reads the directory's
// entries as the kernel gives them, kind included, with no allocation per
// entry: /etc/alternatives holds hundreds, and os.ReadDir's sorted list of
// them was most of loading the host image (0.35 ms of every airlock run).
func onlyLinks(dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 16<<10)
	some := false
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if n == 0 {
			return some
		}
		for b := buf[:n]; len(b) >= direntName; {
			// struct linux_dirent64: ino (8), off (8), reclen (2),
			// type (1), name (NUL-terminated).
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < direntName || reclen > len(b) {
				return false
			}
			name, _, _ := bytes.Cut(b[direntName:reclen], []byte{0})
			switch typ := b[18]; {
			case string(name) == "." || string(name) == "..":
			case typ == unix.DT_LNK, typ == unix.DT_REG && string(name) == "README":
				some = true
			default:
				return false // DT_UNKNOWN too: not known to be a link
			}
			b = b[reclen:]
		}
	}
}

// direntName is the offset of the name in struct linux_dirent64.
const direntName = 19

// ResolverIP is the address /etc/resolv.conf names. The egress gateway
// serves DNS there (internal/egress.ResolverAddr).
const ResolverIP = "127.0.0.53"

// etcFiles are generated for every sandbox.
func etcFiles(hostname string, u *User) []sbinit.File {
	uid, gid := uint32(sandboxUID), uint32(sandboxGID)
	if u != nil {
		uid, gid = u.UID, u.GID
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	group := "root:x:0:\n"
	if uid != 0 && uid != 65534 {
		passwd += fmt.Sprintf("sandbox:x:%d:%d:sandbox:%s:/bin/sh\n", uid, gid, HomeDir)
	}
	if gid != 0 && gid != 65534 {
		group += fmt.Sprintf("sandbox:x:%d:\n", gid)
	}
	return []sbinit.File{
		{Path: "/etc/passwd", Mode: 0o644, Data: passwd + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{Path: "/etc/group", Mode: 0o644, Data: group + "nogroup:x:65534:\n"},
		{Path: "/etc/hosts", Mode: 0o644, Data: "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{Path: "/etc/hostname", Mode: 0o644, Data: hostname + "\n"},
		// The only resolver is the one airlock's egress gateway serves
		// inside the sandbox's namespace; without a gateway lookups fail
		// fast on loopback instead of reaching any resolver of the host's.
		{Path: "/etc/resolv.conf", Mode: 0o644, Data: "nameserver " + ResolverIP + "\noptions timeout:2 attempts:1\n"},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
}
