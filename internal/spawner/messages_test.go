package spawner

import (
	"reflect"
	"testing"

	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"golang.org/x/sys/unix"
)

// TestRequestRoundTrip encodes requests, with and without a program, and
// decodes them back whole; a program's files travel as descriptors, so
// only their number is in it.
func TestRequestRoundTrip(t *testing.T) {
	prog := &forkexec.Prog{
		Ops: []forkexec.Op{
			{Trap: unix.SYS_MKDIRAT, Args: [6]forkexec.Arg{{Kind: forkexec.ArgImm, Imm: ^uint64(99)}, {Kind: forkexec.ArgBlob, Index: 1}, {Kind: forkexec.ArgImm, Imm: 0o755}}, Save: forkexec.NoSave, What: "make /x"},
			{Trap: forkexec.TrapLandlockRule, Args: [6]forkexec.Arg{{Kind: forkexec.ArgSlot, Index: 3}, {Kind: forkexec.ArgImm, Imm: 7}, {Kind: forkexec.ArgExe}}, Save: 4, Whole: true, Skip: 2,
				Else: [2]forkexec.Branch{{Errno: unix.ENOENT, Skip: 1}, {Errno: unix.EINVAL}}, What: "rule"},
		},
		Blobs:  [][]byte{{}, []byte("/x\x00")},
		NFiles: 2,
	}
	for _, q := range []Request{
		{ID: 1, Path: "/proc/self/exe", Arg0: "airlock-init", Env: []string{"A=b"}, IDBase: 1 << 30, IDSize: 65536},
		{ID: 2, Path: "/p", Arg0: "a", IDBase: 5, IDSize: 6, CgroupDir: true, Prog: prog},
	} {
		var got Request
		if err := got.Unmarshal(q.Marshal()); err != nil {
			t.Fatalf("request %d: %v", q.ID, err)
		}
		if got.Prog != nil && len(got.Prog.Blobs[0]) == 0 {
			got.Prog.Blobs[0] = []byte{} // an empty blob decodes as empty, either way
		}
		if got.Prog != nil {
			q.Prog = prog // compared without its unexported state
		}
		if !reflect.DeepEqual(got, q) {
			t.Fatalf("round trip lost something:\n got %+v\nwant %+v", got, q)
		}
	}
	many := &forkexec.Prog{Ops: prog.Ops, Blobs: prog.Blobs, NFiles: maxProgFiles + 1}
	var got Request
	if err := got.Unmarshal((&Request{Prog: many}).Marshal()); err == nil {
		t.Error("a program with too many files decoded")
	}
}
