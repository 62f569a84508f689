package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// TestLockDirParentsTraversable: the host-wide lock directories' parents,
// made by a runtime of another state directory, are traversable (0711),
// so that the default state directory they live in (/run/airlock) is
// still usable by sandboxes: a fresh host's first runtime of a test
// state directory made /run/airlock 0700, and the default failed its
// state directory check.
func TestLockDirParentsTraversable(t *testing.T) {
	requireRoot(t)
	testRuntime(t)
	parent := fmt.Sprintf("/run/airlock-test-locks-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(parent) })
	if _, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t),
		// Only the uid locks elsewhere: a runtime with other group
		// locks would take the live sandboxes' cgroups for leftovers
		// and sweep them.
		IDLockDir: filepath.Join(parent, "ids")}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(parent)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o711 {
		t.Errorf("the lock directories' parent has mode %o, want 711", m)
	}
}
