package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/linux/inroot"
)

// e2bStat is filesystem.Filesystem/Stat of p in sb, its entry decoded.
func e2bStat(t *testing.T, base string, sb e2b.Sandbox, p string) (int, e2b.EntryInfo, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"path": p})
	status, b := e2bDo(t, "POST", base+"/filesystem.Filesystem/Stat", &sb, map[string]string{"Content-Type": "application/json"}, bytes.NewReader(body))
	var out struct {
		Entry e2b.EntryInfo `json:"entry"`
	}
	_ = json.Unmarshal(b, &out)
	return status, out.Entry, b
}

// TestE2BFilesEntries: what describing a file costs and reaches is
// bounded whatever the sandbox plants, checked from the host: metadata
// an upload may not set is refused and nothing written; attributes too
// large to describe are left out; a symlink naming a host path that
// exists is never resolved there; removing below a symlink is refused,
// not answered as missing.
func TestE2BFilesEntries(t *testing.T) {
	d, base := serveE2BDaemon(t, "", nil)
	sb := e2bCreate(t, base)
	ws := hostWorkspace(t, d, sb.SandboxID)
	// plant does what code inside could, as the sandbox's user (the
	// host's root has no id in its user namespace).
	plant := func(fn func() error) {
		t.Helper()
		id := d.e2b.SessionOf(sb.SandboxID).Sandbox().UserHostID()
		if err := inroot.AsUser(id, id, fn); err != nil {
			t.Fatal(err)
		}
	}
	put := func(p string, hdr map[string]string) (int, []byte) {
		h := map[string]string{"Content-Type": "application/octet-stream"}
		for k, v := range hdr {
			h[k] = v
		}
		return e2bDo(t, "POST", base+"/files?path="+p, &sb, h, strings.NewReader("data"))
	}

	if status, b := put("/workspace/refused", map[string]string{"X-Metadata-" + strings.Repeat("k", 300): "v"}); status != http.StatusBadRequest {
		t.Errorf("a metadata key over envd's bound: %d %s, want 400", status, b)
	}
	if status, b := put("/workspace/refused", map[string]string{"X-Metadata-A": strings.Repeat("v", 4000), "X-Metadata-B": strings.Repeat("v", 200)}); status != http.StatusBadRequest {
		t.Errorf("metadata over envd's bound in all: %d %s, want 400", status, b)
	}
	if _, err := os.Lstat(filepath.Join(ws, "refused")); !os.IsNotExist(err) {
		t.Errorf("a refused upload wrote its file (%v)", err)
	}

	// Metadata is kept in user extended attributes, which tmpfs has
	// from Linux 6.6 (the cgroup-v2 guest's 6.1 has none): there an
	// upload with metadata is taken, and the metadata is not kept, as
	// envd on a filesystem without them.
	probe := filepath.Join(ws, "probe")
	xattrs := true
	plant(func() error {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Lsetxattr(probe, "user.probe", []byte("1"), 0); errors.Is(err, unix.EOPNOTSUPP) {
			xattrs = false
		} else if err != nil {
			return err
		}
		return os.Remove(probe)
	})
	status, b := put("/workspace/m", map[string]string{"X-Metadata-Key": "v"})
	switch {
	case !xattrs && (status != http.StatusOK || bytes.Contains(b, []byte(`"metadata"`))):
		t.Errorf("an upload with metadata, on a tmpfs without user attributes: %d %s, want it taken, without", status, b)
	case xattrs && (status != http.StatusOK || !bytes.Contains(b, []byte(`"metadata":{"key":"v"}`))):
		t.Errorf("an upload with metadata: %d %s", status, b)
	}
	if xattrs {
		buf := make([]byte, 16)
		if n, err := unix.Lgetxattr(filepath.Join(ws, "m"), "user.e2b.key", buf); err != nil || string(buf[:n]) != "v" {
			t.Errorf("from the host, user.e2b.key is %q (%v), want v", buf[:max(n, 0)], err)
		}
		// Attributes the code inside could set, too large to describe.
		big := filepath.Join(ws, "big")
		plant(func() error {
			if err := os.WriteFile(big, nil, 0o644); err != nil {
				return err
			}
			return unix.Lsetxattr(big, "user.e2b.big", bytes.Repeat([]byte("x"), 20<<10), 0)
		})
		if status, e, b := e2bStat(t, base, sb, "/workspace/big"); status != http.StatusOK || e.Name != "big" || e.Metadata != nil {
			t.Errorf("a file with 20 KiB of metadata: %d %s, want it described without", status, b)
		}
	}

	// A link to a host path that exists: inside the sandbox it leads
	// nowhere, and so it is described.
	host := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(host, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	plant(func() error { return os.Symlink(host, filepath.Join(ws, "tohost")) })
	status, e, b := e2bStat(t, base, sb, "/workspace/tohost")
	if status != http.StatusOK || e.SymlinkTarget == nil || *e.SymlinkTarget != "/workspace/tohost" || e.Type != "FILE_TYPE_UNSPECIFIED" {
		t.Errorf("a link to a host path: %d %s, want it unresolved", status, b)
	}

	// Removing what is not there answers OK; below a symlink, it is
	// refused as before, and what the link names is untouched.
	body := func(p string) *bytes.Reader {
		b, _ := json.Marshal(map[string]string{"path": p})
		return bytes.NewReader(b)
	}
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	if status, b := e2bDo(t, "POST", base+"/filesystem.Filesystem/Remove", &sb, jsonHdr, body("/workspace/none/x")); status != http.StatusOK {
		t.Errorf("removing what is not there: %d %s, want 200", status, b)
	}
	plant(func() error { return os.Symlink(filepath.Dir(host), filepath.Join(ws, "hostdir")) })
	if status, b := e2bDo(t, "POST", base+"/filesystem.Filesystem/Remove", &sb, jsonHdr, body("/workspace/hostdir/host-secret")); status != http.StatusBadRequest {
		t.Errorf("removing below a symlink: %d %s, want 400", status, b)
	}
	if _, err := os.Stat(host); err != nil {
		t.Errorf("the host's file: %v", err)
	}
}
