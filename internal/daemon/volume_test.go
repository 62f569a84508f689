package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
	"github.com/airlockhq/airlock/sandbox"
)

// TestSessionVolumes: a volume outlives the session that wrote it and is
// seen by the next one; it is its token's only (another token neither
// sees nor attaches it, and may have its own of the same name); it
// cannot be deleted while attached; targets are checked; a symlink a
// session plants in it leads, in the next session, to that sandbox's
// own files, never the host's; a full volume is a named disk breach;
// the node's ceiling of volumes is named past it.
func TestSessionVolumes(t *testing.T) {
	t.Setenv("VOL_TOK_A", "vol-token-a-0123456789abcdef")
	t.Setenv("VOL_TOK_B", "vol-token-b-0123456789abcdef")
	addr := freePort(t)
	_, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  capacity: {volumes: 3}
  tokens:
    - {name: a, secret: a, tools: ["*"]}
    - {name: b, secret: b, tools: ["*"]}
secrets:
  a: {env: VOL_TOK_A}
  b: {env: VOL_TOK_B}
tools:
  sh: {limits: {memory: 64MiB}}
`, nil)
	local := client.New(sock)
	a := client.NewTCP(addr, "vol-token-a-0123456789abcdef")
	b := client.NewTCP(addr, "vol-token-b-0123456789abcdef")
	ctx := t.Context()
	v, err := a.CreateVolume(ctx, api.VolumeRequest{Name: "data", Size: "16MiB"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !strings.HasPrefix(v.ID, "vol_") || v.Size != 16<<20 {
		t.Errorf("volume %+v", v)
	}
	var ce *client.Error
	if _, err := a.CreateVolume(ctx, api.VolumeRequest{Name: "data"}); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("a second volume named data: %v; want 409", err)
	}
	for _, bad := range []api.VolumeRequest{{Name: ""}, {Name: "vol_x"}, {Name: "x", Size: "1KiB"}, {Name: "x", Size: "lots"}} {
		if _, err := a.CreateVolume(ctx, bad); !errors.As(err, &ce) || ce.Status != 400 {
			t.Errorf("volume %+v: %v; want 400", bad, err)
		}
	}

	marker := filepath.Join(os.TempDir(), "airlock-volume-host-marker")
	if err := os.WriteFile(marker, []byte("HOST\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(marker)
	mount := []api.VolumeMount{{Volume: "data", Path: "/data"}}
	s1, err := a.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: mount})
	if err != nil {
		t.Fatalf("a session with the volume: %v", err)
	}
	r, err := a.Exec(ctx, s1.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /data/f && ln -s " + marker + " /data/link && ln -s / /data/root && stat -c %U /data/f"}})
	if err != nil || string(r.Stdout) != "sandbox\n" {
		t.Fatalf("write the volume: %+v %v", r, err)
	}
	if err := a.DeleteVolume(ctx, "data"); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("delete while attached: %v; want 409", err)
	}
	if err := a.DeleteSession(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	s2, err := a.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: mount})
	if err != nil {
		t.Fatal(err)
	}
	r, err = a.Exec(ctx, s2.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat /data/f; cat /data/link 2>&1; cat /data/root" + marker + " 2>&1; true"}})
	if err != nil || !strings.HasPrefix(string(r.Stdout), "kept\n") || strings.Contains(string(r.Stdout), "HOST") {
		t.Errorf("the next session: %+v %v; want the file, and no way to the host's marker", r, err)
	}

	// A session from a snapshot takes volumes too: the snapshot's files
	// (its /workspace and /tmp, never a volume's) and the volume's.
	if r, err := a.Exec(ctx, s2.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo ws > /workspace/w"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("write the workspace: %+v %v", r, err)
	}
	m, err := a.Snapshot(ctx, s2.ID, "withvol")
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != 1 {
		t.Errorf("the snapshot holds %d files; want the workspace's one (a volume is not in it)", m.Files)
	}
	// Once at once (filled by copy, most likely), once from its layer
	// where the kernel can.
	for i := range 2 {
		if i == 1 && sandbox.SeedsSupported() {
			waitLayered(t, a, m.ID)
		}
		s3, err := a.CreateSession(ctx, api.SessionRequest{Snapshot: m.ID, Volumes: mount})
		if err != nil {
			t.Fatalf("a session from the snapshot with the volume: %v", err)
		}
		if r, err := a.Exec(ctx, s3.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat /workspace/w /data/f"}}); err != nil || string(r.Stdout) != "ws\nkept\n" {
			t.Errorf("in the session from the snapshot: %+v %v", r, err)
		}
		if err := a.DeleteSession(ctx, s3.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteSnapshot(ctx, m.ID); err != nil {
		t.Fatal(err)
	}

	// Another token: not seen, not attached; a volume of its own may
	// share the name.
	if l, err := b.Volumes(ctx); err != nil || len(l) != 0 {
		t.Errorf("another token's list: %+v %v", l, err)
	}
	for _, ref := range []string{"data", v.ID} {
		if _, err := b.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: []api.VolumeMount{{Volume: ref, Path: "/data"}}}); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("another token attaching %s: %v; want 404", ref, err)
		}
		if err := b.DeleteVolume(ctx, ref); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("another token deleting %s: %v; want 404", ref, err)
		}
	}
	if _, err := b.CreateVolume(ctx, api.VolumeRequest{Name: "data", Size: "16MiB"}); err != nil {
		t.Errorf("another token's own volume named data: %v", err)
	}

	// Targets.
	for _, p := range []string{"data", "/workspace/data", "/data/../etc", "/etc", "/", "/tmp/x"} {
		if _, err := a.CreateSession(ctx, api.SessionRequest{Tool: "sh", Volumes: []api.VolumeMount{{Volume: "data", Path: p}}}); !errors.As(err, &ce) || ce.Status != 400 {
			t.Errorf("a volume at %q: %v; want 400", p, err)
		}
	}

	// Full: a named breach of the disk; the session ends with it.
	r, err = a.Exec(ctx, s2.ID, api.ExecRequest{Argv: []string{"sh", "-c", "head -c 64M /dev/zero > /data/big; sleep 1"}})
	if err != nil || r.Outcome != result.LimitExceeded || r.Limit == nil || r.Limit.Name != result.LimitDisk || r.Limit.Ceiling != 16<<20 {
		t.Errorf("a full volume: %+v %v; want a disk breach at 16MiB", r, err)
	}

	// The node keeps three; a fourth is refused, naming the ceiling.
	if _, err := a.CreateVolume(ctx, api.VolumeRequest{Name: "more", Size: "16MiB"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateVolume(ctx, api.VolumeRequest{Name: "toomany", Size: "16MiB"}); !errors.As(err, &ce) || ce.Status != 429 || !strings.Contains(err.Error(), "server.capacity.volumes") {
		t.Errorf("a volume past the ceiling: %v; want 429 naming it", err)
	}
	if s, err := a.Session(ctx, s2.ID); err == nil && s.State == api.SessionActive {
		t.Errorf("the session whose volume filled is still active")
	}
	if err := a.DeleteVolume(ctx, "data"); err != nil {
		t.Errorf("delete once detached: %v", err)
	}
	page, err := local.Audit(ctx, client.AuditQuery{Kind: "volume"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range page.Events {
		kinds[e.Kind]++
	}
	if kinds["volume.created"] != 3 || kinds["volume.attached"] != 4 || kinds["volume.deleted"] != 1 {
		t.Errorf("audit: %v; want 3 created, 4 attached, 1 deleted", kinds)
	}
}

// TestToolVolumes: a volume the config gives a tool is in every sandbox
// of it, warm ones included, whoever calls: what one token's run writes
// there the next token's run reads (the config shares it). It is not
// one of any token's own volumes.
func TestToolVolumes(t *testing.T) {
	t.Setenv("TV_TOK_A", "tv-token-a-0123456789abcdef")
	t.Setenv("TV_TOK_B", "tv-token-b-0123456789abcdef")
	addr := freePort(t)
	_, sock := serveConfig(t, `
server:
  tcp: `+addr+`
  tokens:
    - {name: a, secret: a, tools: ["*"]}
    - {name: b, secret: b, tools: ["*"]}
secrets:
  a: {env: TV_TOK_A}
  b: {env: TV_TOK_B}
tools:
  shared:
    pool: {warm: 1}
    limits: {memory: 64MiB}
    volumes: [{name: cache, path: /cache, size: 16MiB}]
`, nil)
	ctx := t.Context()
	a := client.NewTCP(addr, "tv-token-a-0123456789abcdef")
	b := client.NewTCP(addr, "tv-token-b-0123456789abcdef")
	// Each run once the pool is full: a warm sandbox has the volume too
	// (a loaded host fills the pool after the first run asks).
	warm := func() {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ps, err := client.New(sock).Pools(ctx)
			if err == nil && len(ps) == 1 && ps[0].Idle == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool never filled: %+v %v", ps, err)
			}
		}
	}
	warm()
	r, err := a.Run(ctx, api.RunRequest{Tool: "shared", Argv: []string{"sh", "-c", "echo from-a > /cache/note && stat -c %U /cache/note"}})
	if err != nil || r.ExitCode != 0 || string(r.Stdout) != "sandbox\n" {
		t.Fatalf("a's run: %+v %v", r, err)
	}
	warm()
	r, err = b.Run(ctx, api.RunRequest{Tool: "shared", Argv: []string{"cat", "/cache/note"}})
	if err != nil || string(r.Stdout) != "from-a\n" {
		t.Errorf("b's run: %+v %v; want what a wrote", r, err)
	}
	if l, err := a.Volumes(ctx); err != nil || len(l) != 0 {
		t.Errorf("a's volumes: %+v %v; want none of its own", l, err)
	}
	ps, err := client.New(sock).Pools(ctx)
	if err != nil || ps[0].Hits != 2 {
		t.Errorf("pools: %+v %v; want both runs served warm", ps, err)
	}
}
