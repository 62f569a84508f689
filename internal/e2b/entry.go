package e2b

import (
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// Timestamp is t as protobuf's JSON writes a google.protobuf.Timestamp:
// UTC, with 0, 3, 6 or 9 digits of fraction (the SDK's parser takes no
// other count); "" for the zero time, which envd leaves out.
func Timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	ns := t.Nanosecond()
	switch {
	case ns == 0:
		return t.Format("2006-01-02T15:04:05Z")
	case ns%1_000_000 == 0:
		return t.Format("2006-01-02T15:04:05.000Z")
	case ns%1000 == 0:
		return t.Format("2006-01-02T15:04:05.000000Z")
	}
	return t.Format("2006-01-02T15:04:05.000000000Z")
}

// File type bits of st_mode (the same on every Linux architecture).
const (
	sIFMT   = 0o170000
	sIFSOCK = 0o140000
	sIFLNK  = 0o120000
	sIFBLK  = 0o060000
	sIFDIR  = 0o040000
	sIFCHR  = 0o020000
	sIFIFO  = 0o010000
	sISUID  = 0o4000
	sISGID  = 0o2000
	sISVTX  = 0o1000
)

// Permissions is a st_mode as envd writes it in EntryInfo.permissions:
// Go's fs.FileMode String of what os.Lstat gives ("-rw-r--r--",
// "drwxr-xr-x", "Lrwxrwxrwx" for a symlink, "dtrwxrwxrwx" for /tmp).
func Permissions(mode uint32) string {
	m := fs.FileMode(mode & 0o777)
	switch mode & sIFMT {
	case sIFBLK:
		m |= fs.ModeDevice
	case sIFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case sIFDIR:
		m |= fs.ModeDir
	case sIFIFO:
		m |= fs.ModeNamedPipe
	case sIFLNK:
		m |= fs.ModeSymlink
	case sIFSOCK:
		m |= fs.ModeSocket
	}
	if mode&sISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&sISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&sISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m.String()
}

// MetadataXattrPrefix is where envd keeps a file's metadata: extended
// attributes user.e2b.KEY.
const MetadataXattrPrefix = "user.e2b."

// Bounds of a file's metadata, envd's: a key's length (the VFS's 255
// bytes for the whole attribute name), and all names and values
// together (what ext4 keeps in an inode's block).
const (
	MaxMetadataKey   = 255 - len(MetadataXattrPrefix)
	MaxMetadataTotal = 4096
)

// metadataHeader begins each header that carries a file's metadata.
const metadataHeader = "X-Metadata-"

// FileMetadata is the metadata an upload sets on its files, from its
// X-Metadata-KEY headers as envd reads them: KEY lowercased, the first
// value of each; nil when there are none. Keys and values must be
// printable ASCII, within the bounds, or the upload is refused.
func FileMetadata(h http.Header) (map[string]string, error) {
	var out map[string]string
	total := 0
	for name, vs := range h {
		key, ok := strings.CutPrefix(http.CanonicalHeaderKey(name), metadataHeader)
		if !ok || key == "" || len(vs) == 0 {
			continue
		}
		key = strings.ToLower(key)
		v := vs[0]
		if len(key) > MaxMetadataKey {
			return nil, fmt.Errorf("metadata key %q is over %d bytes", shorten(key), MaxMetadataKey)
		}
		if err := printable("key", key); err != nil {
			return nil, err
		}
		if err := printable(fmt.Sprintf("value of %q", shorten(key)), v); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]string{}
		}
		if old, dup := out[key]; dup {
			total -= len(MetadataXattrPrefix) + len(key) + len(old)
		}
		out[key] = v
		if total += len(MetadataXattrPrefix) + len(key) + len(v); total > MaxMetadataTotal {
			return nil, fmt.Errorf("the metadata is over %d bytes in all", MaxMetadataTotal)
		}
	}
	return out, nil
}

func printable(what, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("metadata %s: byte 0x%02x at %d is not printable ASCII", what, c, i)
		}
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
