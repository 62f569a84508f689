package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/sandbox"
)

// Snapshots and forks (docs/decisions/0028): a snapshot is a session's
// files (its workspace and /tmp) captured as an immutable archive of the
// node's store, its owner's only; a session made from one is a fresh
// sandbox of the pool, filled with those files before anyone uses it.
// A fork is N such sessions from one snapshot of a running session.
// Processes and memory are not carried: a fork starts with the files.

// Defaults of the snapshots' ceilings (server.capacity).
const (
	DefaultMaxSnapshots  = 256
	DefaultSnapshotBytes = 20 << 30
	// MaxFork bounds one fork's count, as E2B's.
	MaxFork = 100
	// forkAtOnce bounds the sandboxes a fork fills at once.
	forkAtOnce = 8
)

// snapshotDirs are the sandbox directories a snapshot holds, by the
// names its archive gives them.
var snapshotDirs = []struct{ name, dir string }{{"workspace", sandbox.HomeDir}, {"tmp", "/tmp"}}

// snapshots is the node's store of snapshots, opened on first use: a
// node that never snapshots never makes its directory.
type snapshots struct {
	mu    sync.Mutex // guards store, and orders captures' ceiling checks
	store *snapshot.Store
}

// snapStore opens the store on first use.
func (n *Node) snapStore() (*snapshot.Store, error) {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	return n.snapStoreLocked()
}

func (n *Node) snapStoreLocked() (*snapshot.Store, error) {
	if n.snaps.store == nil {
		dir := n.opts.SnapshotStore
		if dir == "" {
			dir = n.opts.Config.Images.Snapshots
		}
		if dir == "" {
			dir = config.DefaultSnapshots
		}
		var st *snapshot.Store
		var err error
		if n.rt != nil && n.rt.Seeds() {
			// Kept unpacked: sandboxes start from a snapshot with
			// nothing copied (docs/decisions/0029).
			st, err = snapshot.OpenSeeded(dir, n.rt.SeedOwner())
		} else {
			st, err = snapshot.Open(dir)
		}
		if err != nil {
			n.opts.Logger.Error("the snapshot store cannot be opened", "err", err)
			return nil, errdefs.New(errdefs.ErrUnavailable, "the node's snapshot store cannot be opened; see the daemon's log")
		}
		n.snaps.store = st
	}
	return n.snaps.store, nil
}

// validSnapshotName: a name its owner gives a snapshot.
func validSnapshotName(s string) error {
	if len(s) < 1 || len(s) > 64 {
		return errdefs.New(errdefs.ErrInvalid, "a snapshot's name is 1 to 64 characters")
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')) {
			return errdefs.Errorf(errdefs.ErrInvalid, "snapshot name %q: letters, digits and, after the first, - _ .", Shorten(s))
		}
	}
	if len(s) > 5 && s[:5] == "snap_" {
		return errdefs.New(errdefs.ErrInvalid, `a snapshot's name may not begin "snap_", as its ids do`)
	}
	return nil
}

func (n *Node) newSnapshotID() string {
	var b [12]byte
	rand.Read(b[:])
	if n.name != "" {
		return "snap_" + n.name + "-" + hex.EncodeToString(b[:])
	}
	return "snap_" + hex.EncodeToString(b[:])
}

// Snapshot captures session s's files as a new snapshot of c's, named
// name (optional). The session is paused for the capture, so that it is
// one moment of it, and goes on as it was after. Past the node's or c's
// token's ceilings it is refused, naming the ceiling.
func (n *Node) Snapshot(ctx context.Context, s *Session, c *Caller, client, name string) (snapshot.Meta, error) {
	if name != "" {
		if err := validSnapshotName(name); err != nil {
			return snapshot.Meta{}, err
		}
	}
	if s.Dormant() {
		return snapshot.Meta{}, dormantError(s)
	}
	if s.sb.WritableRoot() {
		return snapshot.Meta{}, errdefs.Errorf(errdefs.ErrInvalid, "session %s's tool has a writable root (rootfs: writable), whose changes a snapshot does not hold yet; snapshots are of tools with a read-only root", s.id)
	}
	m, err := n.captureSession(ctx, s, c, name, false)
	if err != nil {
		return m, err
	}
	e := s.auditScope().event(audit.KindSnapshotCreated)
	e.Client = client
	e.Detail = audit.Detail(map[string]any{"snapshot": m.ID, "name": m.Name, "digest": m.Digest, "bytes": m.Size, "files": m.Files, "skipped": m.Skipped})
	n.audit.Record(e)
	return m, nil
}

// captureSession checks the ceilings and captures s, one capture at a time (the
// ceilings are checked against what the store holds); transient for a
// fork's.
func (n *Node) captureSession(ctx context.Context, s *Session, c *Caller, name string, transient bool) (snapshot.Meta, error) {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	st, err := n.snapStoreLocked()
	if err != nil {
		return snapshot.Meta{}, err
	}
	all, bytes := st.Usage(func(string) bool { return true })
	switch {
	case all >= n.opts.MaxSnapshots:
		return snapshot.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("the node keeps %d snapshots, the most it may (server.capacity.snapshots); delete one first", all)}
	case bytes >= n.opts.SnapshotBytes:
		return snapshot.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("the node's snapshots hold %s, the most it keeps (server.capacity.snapshot_bytes); delete one first", units.FormatSize(bytes))}
	}
	if tok := c.Token; tok != nil && tok.Snapshots > 0 {
		if mine, _ := st.Usage(func(o string) bool { return o == c.Name }); mine >= tok.Snapshots {
			return snapshot.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
				Msg: fmt.Sprintf("token %s has %d snapshots, the most it may (its snapshots); delete one first", tok.Name, tok.Snapshots)}
		}
	}
	// The session may not end, pause or resume under the capture.
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if !s.hold() {
		return snapshot.Meta{}, s.EnterError()
	}
	defer s.wg.Done()
	if !s.Paused() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseWait)
		err := s.sb.Pause(fctx)
		cancel()
		if err != nil {
			return snapshot.Meta{}, errdefs.Errorf(errdefs.ErrUnavailable, "session %s could not be paused for its snapshot: a process of it would not stop in %s", s.id, pauseWait)
		}
		defer func() {
			if err := s.sb.Resume(); err != nil {
				n.opts.Logger.Warn("resume after a snapshot failed", "session", s.id, "err", err)
			}
		}()
	}
	dirs, closeDirs, err := openSnapshotDirs(s.sb)
	if err != nil {
		return snapshot.Meta{}, ErrGone
	}
	defer closeDirs()
	uid := s.sb.UserHostID()
	m, err := st.Capture(dirs, uid, uid, snapshot.Meta{ID: n.newSnapshotID(), Name: name, Owner: c.Name, Tool: s.tool.Name, Source: s.id, Created: time.Now().UTC(), Transient: transient})
	switch {
	case errors.Is(err, snapshot.ErrNameUsed):
		return m, err
	case errors.Is(err, inroot.ErrTooLarge):
		return m, errdefs.Errorf(errdefs.ErrLimit, "session %s holds more than %d files; a snapshot holds at most that many", s.id, inroot.MaxEntries)
	case err != nil:
		n.opts.Logger.Warn("snapshot failed", "session", s.id, "err", err)
		return m, errdefs.Errorf(errdefs.ErrUnavailable, "session %s's snapshot failed: %v", s.id, FileError(err))
	}
	return m, nil
}

// openSnapshotDirs opens sb's directories a snapshot holds.
func openSnapshotDirs(sb *sandbox.Sandbox) ([]snapshot.Dir, func(), error) {
	var dirs []snapshot.Dir
	closeAll := func() {
		for _, d := range dirs {
			d.F.Close()
		}
	}
	for _, d := range snapshotDirs {
		f, err := sb.OpenDir(d.dir)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		dirs = append(dirs, snapshot.Dir{Name: d.name, F: f})
	}
	return dirs, closeAll, nil
}

// hold counts a call of the node's own in the session (End waits for it),
// paused or not; false once it has ended.
func (s *Session) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.wg.Add(1)
	return true
}

// collectSnapshots deletes the snapshots older than the config's
// policy (images.snapshot_max_age), recording each deletion; nothing
// without one. The reaper calls it.
func (n *Node) collectSnapshots(now time.Time) {
	maxAge := n.opts.Config.Images.SnapshotMaxAge
	if maxAge <= 0 {
		return
	}
	n.snaps.mu.Lock()
	st := n.snaps.store
	n.snaps.mu.Unlock()
	if st == nil {
		if _, err := os.Stat(n.snapDir()); err != nil {
			return // none was ever taken
		}
		var err error
		if st, err = n.snapStore(); err != nil {
			return
		}
	}
	for _, m := range st.OlderThan(maxAge, now) {
		if err := st.Delete(m.ID); err != nil {
			n.opts.Logger.Warn("an old snapshot could not be collected", "snapshot", m.ID, "err", err)
			continue
		}
		e := audit.Event{Kind: audit.KindSnapshotDeleted, Tool: m.Tool, Client: "policy"}
		e.Detail = audit.Detail(map[string]string{"snapshot": m.ID, "name": m.Name, "reason": "older than images.snapshot_max_age (" + maxAge.String() + ")"})
		n.audit.Record(e)
	}
}

// Snapshots are the snapshots c may see, oldest first.
func (n *Node) Snapshots(c *Caller) ([]snapshot.Meta, error) {
	st, err := n.snapStore()
	if err != nil {
		return nil, err
	}
	return st.List(c.Sees), nil
}

// FindSnapshot is c's snapshot of that id or name.
func (n *Node) FindSnapshot(c *Caller, idOrName string) (snapshot.Meta, error) {
	st, err := n.snapStore()
	if err != nil {
		return snapshot.Meta{}, err
	}
	return st.Find(idOrName, c.Sees)
}

// DeleteSnapshot deletes c's snapshot of that id or name, for client.
func (n *Node) DeleteSnapshot(c *Caller, idOrName, client string) error {
	m, err := n.FindSnapshot(c, idOrName)
	if err != nil {
		return err
	}
	if err := n.snaps.store.Delete(m.ID); err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return err
		}
		n.opts.Logger.Warn("snapshot delete failed", "snapshot", m.ID, "err", err)
		return errdefs.New(errdefs.ErrUnavailable, "the snapshot could not be deleted; see the daemon's log")
	}
	e := audit.Event{Kind: audit.KindSnapshotDeleted, Tool: m.Tool, Client: client}
	e.Detail = audit.Detail(map[string]string{"snapshot": m.ID, "name": m.Name})
	n.audit.Record(e)
	return nil
}

// OpenFromSnapshot opens a session of snapshot m's tool for c (as
// OpenSessionWith, mounts its volumes), whose fresh sandbox starts with
// m's files: made with
// them as the lower layers of its /workspace and /tmp where the store
// keeps them unpacked (nothing is copied), else a sandbox of the pool
// filled with them before it is returned. Files over the tool's disk
// ceiling are refused; a restore that fails ends the session and says
// why.
func (n *Node) OpenFromSnapshot(ctx context.Context, m snapshot.Meta, client string, c *Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []VolumeMount) (*Session, error) {
	t := n.Config().Tools[m.Tool]
	if t == nil {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "snapshot %s is of tool %q, which this node no longer has", m.ID, Shorten(m.Tool))
	}
	st, err := n.snapStore()
	if err != nil {
		return nil, err
	}
	if dir, lock, ok := st.Seed(m); ok {
		// The seed's files are below the sandbox's own writes and not
		// on its disk tmpfs; they are held to its ceiling all the same,
		// as a copy of them would be.
		if disk := n.plan(t.Name).Spec.Limits.Disk; m.Size > disk {
			return nil, n.tooBig(m, t.Name)
		}
		s, err := n.openSession(ctx, t, client, c, idle, life, narrowed, mounts, fresh{seed: &sandbox.Seed{Dir: dir, Lock: lock}})
		if err != nil {
			return nil, err
		}
		n.restored(s, m, client)
		return s, nil
	}
	s, err := n.OpenSessionWith(ctx, t, client, c, idle, life, narrowed, mounts)
	if err != nil {
		return nil, err
	}
	if err := n.restore(s, m, client); err != nil {
		_ = s.End(context.WithoutCancel(ctx), "snapshot not restored")
		return nil, err
	}
	return s, nil
}

// tooBig is the refusal of snapshot m's files, over tool's disk ceiling.
func (n *Node) tooBig(m snapshot.Meta, tool string) error {
	return errdefs.Errorf(errdefs.ErrLimit, "snapshot %s's files (%s) do not fit in tool %s's disk ceiling", m.ID, units.FormatSize(m.Size), tool)
}

// restored records that session s started from snapshot m.
func (n *Node) restored(s *Session, m snapshot.Meta, client string) {
	e := s.auditScope().event(audit.KindSnapshotRestored)
	e.Client = client
	e.Detail = audit.Detail(map[string]string{"snapshot": m.ID, "source": m.Source})
	n.audit.Record(e)
}

func (n *Node) restore(s *Session, m snapshot.Meta, client string) error {
	st, err := n.snapStore()
	if err != nil {
		return err
	}
	dirs, closeDirs, err := openSnapshotDirs(s.sb)
	if err != nil {
		return ErrGone
	}
	defer closeDirs()
	uid := s.sb.UserHostID()
	if err := st.Restore(m, dirs, uid, uid); err != nil {
		if errors.Is(err, inroot.ErrNoSpace) {
			return n.tooBig(m, s.tool.Name)
		}
		n.opts.Logger.Warn("snapshot restore failed", "snapshot", m.ID, "session", s.id, "err", err)
		return errdefs.Errorf(errdefs.ErrUnavailable, "snapshot %s could not be restored; see the daemon's log", m.ID)
	}
	n.restored(s, m, client)
	return nil
}

// Forked is one outcome of a fork: a session, or why it was not made.
type Forked struct {
	Session *Session
	Err     error
}

// Fork makes count fresh sessions (at most MaxFork) of s's tool for c,
// each filled with s's files as they are now, with life and s's idle
// timeout, its egress narrowed as s's. Each succeeds or fails on its own
// (the node's capacity, c's concurrency); the snapshot they are made
// from is deleted once they are.
func (n *Node) Fork(ctx context.Context, s *Session, c *Caller, client string, count int, life time.Duration) ([]Forked, error) {
	if count < 1 || count > MaxFork {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "a fork makes 1 to %d sandboxes, not %d", MaxFork, count)
	}
	if s.Dormant() {
		return nil, dormantError(s)
	}
	if s.sb.WritableRoot() {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "session %s's tool has a writable root (rootfs: writable), whose changes a fork does not carry yet", s.id)
	}
	m, err := n.captureSession(ctx, s, c, "", true)
	if err != nil {
		return nil, err
	}
	defer func() {
		n.snaps.mu.Lock()
		_ = n.snaps.store.Delete(m.ID)
		n.snaps.mu.Unlock()
	}()
	e := s.auditScope().event(audit.KindSessionForked)
	e.Client = client
	e.Detail = audit.Detail(map[string]any{"count": count, "bytes": m.Size, "files": m.Files})
	n.audit.Record(e)
	out := make([]Forked, count)
	sem := make(chan struct{}, forkAtOnce)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f, err := n.OpenFromSnapshot(ctx, m, client, c, s.idle, life, s.narrowed, nil)
			out[i] = Forked{Session: f, Err: err}
			if f != nil {
				f.SetLifecycle(s.Lifecycle())
			}
		}()
	}
	wg.Wait()
	return out, nil
}
