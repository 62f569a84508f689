package daemon

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/broker/redact"
	"github.com/airlockhq/airlock/sandbox"
)

// TestSessionSnapshot takes a snapshot of a session whose code used the
// broker (the upstream echoing the credential it got back, in several
// encodings) and wrote files in its workspace and /tmp: the archive on
// the host holds none of the secret's forms; two sessions made from the
// snapshot by name each start from its files in a fresh sandbox of their
// own, and changing one changes nothing of the other or of the source,
// which goes on running; another token neither sees nor uses it; names
// are checked; the node's ceiling of snapshots is named past it.
func TestSessionSnapshot(t *testing.T) {
	const secret = "sn4p-s3cret-9f8e7d6c5b4a"
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A hostile upstream: it echoes the credential in every form a
		// redactor might miss.
		a := r.Header.Get("Authorization")
		got.Store(a)
		fmt.Fprintf(w, "%s|%s|%s|%s|%s", a, hex.EncodeToString([]byte(a)), base64.StdEncoding.EncodeToString([]byte(a)), url.QueryEscape(a), strings.ToUpper(hex.EncodeToString([]byte(a))))
	}))
	defer up.Close()
	t.Setenv("SNAP_TEST_SECRET", secret)
	t.Setenv("SNAP_TOK_A", "snap-token-a-0123456789abcdef")
	t.Setenv("SNAP_TOK_B", "snap-token-b-0123456789abcdef")
	addr := freePort(t)
	store := filepath.Join(t.TempDir(), "snapshots")
	_, sock := serveConfig(t, fmt.Sprintf(`
server:
  tcp: %s
  capacity: {snapshots: 3}
  tokens:
    - {name: a, secret: a, tools: ["*"]}
    - {name: b, secret: b, tools: ["*"]}
secrets:
  a: {env: SNAP_TOK_A}
  b: {env: SNAP_TOK_B}
  k: {env: SNAP_TEST_SECRET}
tools:
  sh:
    limits: {memory: 128MiB}
    services: [api]
services:
  api:
    upstream: %s
    private: true
    credential: {secret: k}
    operations: [GET /echo]
`, addr, up.URL), func(o *Options) { o.SnapshotStore = store })
	local := client.New(sock)
	a := client.NewTCP(addr, "snap-token-a-0123456789abcdef")
	b := client.NewTCP(addr, "snap-token-b-0123456789abcdef")
	ctx := t.Context()
	s, err := a.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", `
curl -s http://127.0.0.3/api/echo > answer
env > /tmp/env
cat /proc/self/environ > /tmp/environ 2>/dev/null
mkdir -p sub/deep && echo deep > sub/deep/file
printf '#!/bin/sh\necho ran from the snapshot\n' > run.sh && chmod 755 run.sh
ln -s sub/deep/file link
echo scratch > /tmp/note`}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("prepare: %+v %v", r, err)
	}
	if a, _ := got.Load().(string); !strings.Contains(a, secret) {
		t.Fatalf("the upstream got %q: the broker did not attach the secret, and the test would prove nothing", a)
	}

	m, err := a.Snapshot(ctx, s.ID, "base")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if !strings.HasPrefix(m.ID, "snap_") || m.Name != "base" || m.Tool != "sh" || m.Source != s.ID || m.Size == 0 || !strings.HasPrefix(m.Digest, "sha256-") {
		t.Errorf("snapshot %+v", m)
	}
	// Where the kernel can, the sessions below start from the
	// snapshot's layer (its files unpacked in the background), not a
	// copy: the fork below tests the copy.
	if sandbox.SeedsSupported() {
		waitLayered(t, a, "base")
	}
	// Every file of the store, the archive or the unpacked seed
	// included (names and links too): no form of the secret.
	forms := redact.New(secret).Forms()
	forms = append(forms, []byte(hex.EncodeToString([]byte(secret))), []byte(strings.ToUpper(hex.EncodeToString([]byte(secret)))),
		[]byte(base64.StdEncoding.EncodeToString([]byte(secret))), []byte(base64.StdEncoding.EncodeToString([]byte("Bearer "+secret))))
	files := 0
	err = filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		data := []byte(p)
		switch {
		case d.Type().IsRegular():
			files++
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data = append(data, b...)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			data = append(data, l...)
		}
		for _, f := range forms {
			if bytes.Contains(data, f) {
				t.Errorf("%s holds the secret as %q", p, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The record and the archive at least (and the seed's files where
	// the kernel takes seeds).
	if files < 2 {
		t.Fatalf("the store holds %d files, want the record and the archive", files)
	}

	// The source goes on running, unpaused.
	if v, err := a.Session(ctx, s.ID); err != nil || v.State != api.SessionActive {
		t.Errorf("the source after its snapshot: %+v %v", v, err)
	}
	var made []*api.Session
	for range 2 {
		n, err := a.CreateSession(ctx, api.SessionRequest{Snapshot: "base"})
		if err != nil {
			t.Fatalf("a session from the snapshot: %v", err)
		}
		made = append(made, n)
		r, err := a.Exec(ctx, n.ID, api.ExecRequest{Argv: []string{"sh", "-c", "./run.sh; cat link /tmp/note; stat -c %U run.sh; grep -c . answer"}})
		if err != nil || string(r.Stdout) != "ran from the snapshot\ndeep\nscratch\nsandbox\n1\n" {
			t.Errorf("in a session from the snapshot: %+v %v", r, err)
		}
	}
	if made[0].SandboxID == made[1].SandboxID || made[0].SandboxID == s.SandboxID {
		t.Errorf("sessions from one snapshot share a sandbox: %s %s %s", made[0].SandboxID, made[1].SandboxID, s.SandboxID)
	}
	if _, err := a.Exec(ctx, made[0].ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo changed > sub/deep/file"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{made[1].ID, s.ID} {
		if r, _ := a.Exec(ctx, id, api.ExecRequest{Argv: []string{"cat", "sub/deep/file"}}); r == nil || string(r.Stdout) != "deep\n" {
			t.Errorf("session %s saw another's change: %+v", id, r)
		}
	}

	// Another token: not seen, not used, not deleted.
	var ce *client.Error
	if l, err := b.Snapshots(ctx); err != nil || len(l) != 0 {
		t.Errorf("another token's list: %+v %v", l, err)
	}
	for _, ref := range []string{"base", m.ID} {
		if _, err := b.CreateSession(ctx, api.SessionRequest{Snapshot: ref}); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("another token's session from %s: %v; want 404", ref, err)
		}
		if err := b.DeleteSnapshot(ctx, ref); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("another token's delete of %s: %v; want 404", ref, err)
		}
	}
	if l, err := local.Snapshots(ctx); err != nil || len(l) != 1 {
		t.Errorf("the local socket's list: %+v %v", l, err)
	}

	// Names, and the tool.
	for _, c := range []struct{ name, want string }{
		{"base", "409"}, {"snap_x", "400"}, {"-x", "400"}, {strings.Repeat("n", 65), "400"}, {"a/b", "400"},
	} {
		if _, err := a.Snapshot(ctx, s.ID, c.name); !errors.As(err, &ce) || fmt.Sprint(ce.Status) != c.want {
			t.Errorf("snapshot named %q: %v; want %s", c.name, err, c.want)
		}
	}
	if _, err := a.CreateSession(ctx, api.SessionRequest{Snapshot: "base", Tool: "other"}); !errors.As(err, &ce) || ce.Status != 400 {
		t.Errorf("a session from the snapshot with another tool: %v; want 400", err)
	}

	// Two more reach the node's ceiling of three; the fourth is refused.
	// The first is of a session that started from the snapshot, its
	// change over the snapshot's files: a session from it holds both.
	second, err := a.Snapshot(ctx, made[0].ID, "")
	if err != nil {
		t.Fatalf("snapshot of a session from a snapshot: %v", err)
	}
	from2, err := a.CreateSession(ctx, api.SessionRequest{Snapshot: second.ID})
	if err != nil {
		t.Fatalf("a session from the second snapshot: %v", err)
	}
	if r, err := a.Exec(ctx, from2.ID, api.ExecRequest{Argv: []string{"sh", "-c", "./run.sh; cat sub/deep/file"}}); err != nil || string(r.Stdout) != "ran from the snapshot\nchanged\n" {
		t.Errorf("in a session from the second snapshot: %+v %v", r, err)
	}
	if err := a.DeleteSession(ctx, from2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctx, s.ID, ""); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if _, err := b.CreateSession(ctx, api.SessionRequest{Tool: "sh"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctx, s.ID, ""); !errors.As(err, &ce) || ce.Status != 429 || !strings.Contains(err.Error(), "server.capacity.snapshots") {
		t.Errorf("a snapshot past the ceiling: %v; want 429 naming it", err)
	}

	// Deleted: gone for its owner too; the sessions made from it go on.
	if err := a.DeleteSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetSnapshot(ctx, m.ID); !errors.As(err, &ce) || ce.Status != 404 {
		t.Errorf("a deleted snapshot: %v; want 404", err)
	}
	if r, err := a.Exec(ctx, made[1].ID, api.ExecRequest{Argv: []string{"./run.sh"}}); err != nil || r.ExitCode != 0 {
		t.Errorf("a session from a deleted snapshot: %+v %v", r, err)
	}
	page, err := local.Audit(ctx, client.AuditQuery{Kind: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range page.Events {
		kinds[e.Kind]++
	}
	if kinds["snapshot.created"] != 3 || kinds["snapshot.restored"] != 3 || kinds["snapshot.deleted"] != 1 {
		t.Errorf("audit: %v; want 3 created, 3 restored, 1 deleted", kinds)
	}
}

// TestSessionFork forks a session into three, each a fresh sandbox with
// its files; a fork past the node's budget of sandboxes makes what fits
// and names the ceiling for the rest, and the node never holds more
// sandboxes than its budget.
func TestSessionFork(t *testing.T) {
	d, sock := serveConfig(t, `
server:
  capacity: {sandboxes: 4}
tools:
  sh: {limits: {memory: 64MiB}}
`, nil)
	c := client.New(sock)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo forked > f; sleep 600 >/dev/null 2>&1 &"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	var ce *client.Error
	for _, n := range []int{-1, 101} {
		if _, err := c.Fork(ctx, s.ID, api.ForkRequest{Count: n}); !errors.As(err, &ce) || ce.Status != 400 {
			t.Errorf("fork of %d: %v; want 400", n, err)
		}
	}
	fs, err := c.Fork(ctx, s.ID, api.ForkRequest{Count: 5})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	var ok, refused int
	for _, f := range fs {
		switch {
		case f.Session != nil:
			ok++
			r, err := c.Exec(ctx, f.Session.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat f; pgrep -c sleep || true"}})
			if err != nil || string(r.Stdout) != "forked\n0\n" {
				t.Errorf("in a fork: %+v %v; want its files, not its processes", r, err)
			}
		case f.Error != nil && f.Error.Code == api.CodeCapacity:
			refused++
		default:
			t.Errorf("a fork's outcome: %+v", f)
		}
	}
	if ok != 3 || refused != 2 {
		t.Errorf("five forks under a budget of 4 with one session open: %d made, %d refused; want 3 and 2", ok, refused)
	}
	if u := d.Runtime().Usage(); u.Sandboxes > 4 {
		t.Errorf("the node holds %d sandboxes, over its budget of 4", u.Sandboxes)
	}
	if l, err := c.Snapshots(ctx); err != nil || len(l) != 0 {
		t.Errorf("the fork's snapshot outlived it: %+v %v", l, err)
	}
}

// waitLayered waits until snapshot ref's files are unpacked as a layer.
func waitLayered(t *testing.T, c *client.Client, ref string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		v, err := c.GetSnapshot(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if v.Layered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s was not layered in 20 s", ref)
		}
	}
}
