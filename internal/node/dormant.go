package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/broker"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/snapshot"
)

// A paused session across a restart of the daemon. Its sandbox cannot
// outlive the daemon: init ends with its control channel, and no
// checkpoint of a sandbox with all of airlock's confinement is taken
// (docs/decisions/0028). So each pause keeps the session's files too, in
// the background a little after the sandbox is frozen (keepDelay; the
// pause itself does not wait): an archive of its workspace and /tmp, and
// a record of the
// session, in the snapshot directory's "paused". A daemon that starts
// and finds records brings those sessions back paused and dormant: no
// sandbox, its files kept. Resuming one makes a fresh sandbox with those
// files, and says plainly that its processes did not survive: a plain
// resume is refused, naming how to resume from the files. Never silently.

// ErrProcessesLost: a resume of a session whose processes did not
// survive a restart of the daemon, without asking for its files alone.
var ErrProcessesLost = errdefs.New(errdefs.ErrConflict, "the session's processes did not survive a restart of the daemon")

// pausedRecord is a kept pause, as written to the disk.
type pausedRecord struct {
	Session   string        `json:"session"`
	Owner     string        `json:"owner"`
	Tool      string        `json:"tool"`
	Client    string        `json:"client"`
	Snapshot  string        `json:"snapshot"`
	Created   time.Time     `json:"created"`
	PausedAt  time.Time     `json:"paused_at"`
	Idle      time.Duration `json:"idle"`
	LifeLeft  time.Duration `json:"life_left"`
	Lifecycle Lifecycle     `json:"lifecycle"`
	// Narrowed says the opener narrowed the tool's policy: to Egress
	// alone, with no broker services unless Services.
	Narrowed bool                 `json:"narrowed,omitempty"`
	Egress   []policy.Destination `json:"egress,omitempty"`
	Services bool                 `json:"services,omitempty"`
	// Set is the headers the opener set on the calls of each service
	// that has some (brokerspec.Service.Set; never a credential).
	Set map[string]map[string]string `json:"set,omitempty"`
	// Edge is what the edge that opened it keeps of it (E2B's
	// metadata and environment), opaque here.
	Edge json.RawMessage `json:"edge,omitempty"`
}

// kept is the node's store of kept pauses, opened on first use.
type kept struct {
	mu    sync.Mutex // guards store
	store *snapshot.Store
}

func (n *Node) snapDir() string {
	switch {
	case n.opts.SnapshotStore != "":
		return n.opts.SnapshotStore
	case n.opts.Config.Images.Snapshots != "":
		return n.opts.Config.Images.Snapshots
	}
	return config.DefaultSnapshots
}

func (n *Node) keptDir() string { return filepath.Join(n.snapDir(), "paused") }

func (n *Node) keptStore() (*snapshot.Store, error) {
	n.kept.mu.Lock()
	defer n.kept.mu.Unlock()
	if n.kept.store == nil {
		st, err := snapshot.Open(n.keptDir())
		if err != nil {
			return nil, err
		}
		n.kept.store = st
	}
	return n.kept.store, nil
}

func (n *Node) recordPath(session string) string {
	return filepath.Join(n.keptDir(), "session-"+session+".rec")
}

// keepDelay is how long a pause lasts before its files are kept: a
// session paused and resumed within it (a caller's quick pause, a
// snapshot's) costs no capture. A daemon stopping keeps them at once.
const keepDelay = 2 * time.Second

// keepFiles keeps paused session s's files and record, in the background
// of pause gen; it drops what it made if s was resumed or ended
// meanwhile.
func (n *Node) keepFiles(s *Session, gen uint64) {
	t := time.NewTimer(keepDelay)
	select {
	case <-t.C:
	case <-n.quit.Done():
		t.Stop()
	}
	s.mu.Lock()
	current := s.paused && !s.ended && s.pauseGen == gen
	s.mu.Unlock()
	if !current {
		return
	}
	st, err := n.keptStore()
	if err != nil {
		n.opts.Logger.Warn("a pause's files cannot be kept", "session", s.id, "err", err)
		return
	}
	dirs, closeDirs, err := openSnapshotDirs(s.sb)
	if err != nil {
		return // ended meanwhile
	}
	uid := s.sb.UserHostID()
	m, err := st.Capture(dirs, uid, uid, snapshot.Meta{ID: n.newSnapshotID(), Owner: s.owner, Tool: s.tool.Name, Source: s.id, Created: time.Now().UTC()})
	closeDirs()
	if err != nil {
		n.opts.Logger.Warn("a pause's files could not be kept: the session will not survive a restart of the daemon", "session", s.id, "err", err)
		return
	}
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	current = s.paused && !s.ended && s.pauseGen == gen
	rec := pausedRecord{Session: s.id, Owner: s.owner, Tool: s.tool.Name, Client: s.scope.client, Snapshot: m.ID, Created: s.created,
		PausedAt: s.pausedAt, Idle: s.idle, LifeLeft: s.lifeLeft, Lifecycle: s.lifecycle, Edge: s.edge}
	s.mu.Unlock()
	if !current {
		_ = st.Delete(m.ID)
		return
	}
	if p := s.narrowed; p != nil {
		rec.Narrowed, rec.Egress, rec.Services = true, p.Egress, len(p.Services) > 0
		for _, svc := range p.Services {
			if len(svc.Set) > 0 {
				if rec.Set == nil {
					rec.Set = map[string]map[string]string{}
				}
				rec.Set[svc.Name] = svc.Set
			}
		}
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = writeRecord(n.recordPath(s.id), b)
	}
	if err != nil {
		_ = st.Delete(m.ID)
		n.opts.Logger.Warn("a pause's record could not be written: the session will not survive a restart of the daemon", "session", s.id, "err", err)
		return
	}
	s.mu.Lock()
	s.kept = &m
	s.mu.Unlock()
}

// dropKept forgets s's kept pause, if any: once it runs again, or ends.
// The caller holds s.pauseMu.
func (n *Node) dropKept(s *Session) {
	s.mu.Lock()
	m := s.kept
	s.kept = nil
	s.mu.Unlock()
	if m == nil {
		return
	}
	// The record goes now: without it no daemon brings the session back
	// dormant. Its archive after, off the caller's path (one no record
	// names is removed by the next daemon too).
	if err := os.Remove(n.recordPath(s.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.opts.Logger.Warn("a kept pause's record could not be removed", "session", s.id, "err", err)
	}
	n.keeping.Add(1)
	go func() {
		defer n.keeping.Done()
		if st, err := n.keptStore(); err == nil {
			_ = st.Delete(m.ID)
		}
	}()
}

func writeRecord(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// loadDormant brings back the sessions a previous daemon left paused,
// dormant: before the node serves. One that cannot come back (its tool
// or its owner's token gone from the config, its files missing) is
// dropped, and its end recorded with the reason.
func (n *Node) loadDormant(ctx context.Context) {
	ents, err := os.ReadDir(n.keptDir())
	if err != nil {
		return // none kept
	}
	st, err := n.keptStore()
	if err != nil {
		n.opts.Logger.Error("kept pauses cannot be read: the paused sessions of the previous daemon are lost", "err", err)
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "session-") || !strings.HasSuffix(e.Name(), ".rec") {
			continue
		}
		path := filepath.Join(n.keptDir(), e.Name())
		var rec pausedRecord
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			n.opts.Logger.Warn("a kept pause's record is unreadable; removed", "file", path, "err", err)
			os.Remove(path)
			continue
		}
		if why := n.revive(ctx, rec, st); why != "" {
			os.Remove(path)
			e := audit.Event{Kind: audit.KindSessionEnded, Tool: rec.Tool, Session: rec.Session, Client: rec.Client}
			e.Detail = audit.Detail(map[string]string{"reason": why})
			n.audit.Record(e)
		}
	}
	// Archives no record names (a pause resumed as the daemon died).
	for _, m := range st.List(func(string) bool { return true }) {
		if _, err := os.Stat(n.recordPath(m.Source)); errors.Is(err, os.ErrNotExist) {
			_ = st.Delete(m.ID)
		}
	}
}

// revive makes rec's session again, dormant, or says why it cannot.
func (n *Node) revive(ctx context.Context, rec pausedRecord, st *snapshot.Store) string {
	t := n.opts.Config.Tools[rec.Tool]
	if t == nil {
		return "restart: its tool is gone from the config"
	}
	c := Local
	if rec.Owner != Local.Name {
		name, ok := strings.CutPrefix(rec.Owner, "token:")
		var tok *config.Token
		for i := range n.opts.Config.Server.Tokens {
			if ok && n.opts.Config.Server.Tokens[i].Name == name {
				tok = &n.opts.Config.Server.Tokens[i]
			}
		}
		if tok == nil {
			return "restart: its owner's token is gone from the config"
		}
		c = TokenCaller(tok)
	}
	m, err := st.Find(rec.Snapshot, func(string) bool { return true })
	if err != nil {
		return "restart: its kept files are missing"
	}
	releaseHold, err := n.hold(c, true)
	if err != nil {
		return "restart: " + err.Error()
	}
	unpause, err := n.holdPaused(c.Token)
	if err != nil {
		releaseHold()
		return "restart: " + err.Error()
	}
	scope := runScope{tool: t.Name, session: rec.Session, client: rec.Client}
	s := &Session{ending: make(chan struct{}), done: make(chan struct{}), id: rec.Session, owner: c.Name, tool: t, created: rec.Created,
		lastUsed: rec.PausedAt, idle: rec.Idle, scope: scope, token: c.Token, lifecycle: rec.Lifecycle, edge: rec.Edge,
		paused: true, pausedAt: rec.PausedAt, lifeLeft: rec.LifeLeft, unpause: unpause, dormant: true, kept: &m}
	if rec.Narrowed {
		pol := n.plan(t.Name).Policy
		pol.Egress = rec.Egress
		if !rec.Services {
			pol.Services = nil
		}
		if len(rec.Set) > 0 {
			pol.Services = slices.Clone(pol.Services)
			for i, svc := range pol.Services {
				// Checked again: the config may have changed since.
				// A header no longer allowed is left out.
				set := map[string]string{}
				for k, v := range rec.Set[svc.Name] {
					if broker.CheckSet(svc, k, v) == nil {
						set[k] = v
					}
				}
				if len(set) > 0 {
					pol.Services[i] = svc.WithSet(set)
				}
			}
		}
		s.narrowed = &pol
	}
	s.onEnd = n.sessionEnd(s, releaseHold)
	n.sessions.mu.Lock()
	n.sessions.m[s.id] = s
	n.sessions.mu.Unlock()
	e := scope.event(audit.KindSessionPaused)
	e.Detail = audit.Detail(map[string]string{"reason": "restart", "processes": "lost: the daemon restarted", "files": "kept"})
	n.audit.Record(e)
	_ = ctx
	return ""
}

// suspend, at the daemon's stop, leaves a paused session whose files are
// kept for the next daemon: its sandbox destroyed, its record kept, its
// end not recorded (it has not ended). It reports false for any other
// session, which the stop ends.
func (n *Node) suspend(ctx context.Context, s *Session) bool {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	keep := s.paused && s.kept != nil && !s.ended
	if keep {
		s.ended, s.endReason, s.endedAt = true, "daemon stopped (kept paused, its files only)", time.Now()
		close(s.ending)
	}
	sb, bind := s.sb, s.bind
	s.mu.Unlock()
	if !keep {
		return false
	}
	if sb != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		s.wg.Wait()
		_ = bind.Close(context.WithoutCancel(ctx))
	}
	// Its volumes are free to unmount: its sandbox is gone, and the
	// next daemon's resume from the files attaches none.
	if s.releaseVols != nil {
		s.releaseVols()
	}
	close(s.done)
	return true
}

// auditScope is s's audit scope, read under its lock: a session resumed
// from its kept files has a sandbox, and so a scope, it did not have.
func (s *Session) auditScope() runScope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scope
}

// Dormant reports whether s came back from a restart of the daemon with
// its files alone: no sandbox until it is resumed from them.
func (s *Session) Dormant() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dormant
}

// SetEdgeState keeps what the edge that opened s needs of it across a
// restart of the daemon (opaque here; at most a few KiB).
func (s *Session) SetEdgeState(b json.RawMessage) {
	s.mu.Lock()
	s.edge = b
	s.mu.Unlock()
}

// EdgeState is what SetEdgeState kept.
func (s *Session) EdgeState() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.edge
}

// ResumeFromFiles resumes session s for client as Resume does; a dormant
// session (its processes lost to a restart of the daemon) gets a fresh
// sandbox of its tool with its kept files. files is true when that is
// what happened.
func (n *Node) ResumeFromFiles(ctx context.Context, s *Session, client, reason string, life time.Duration) (resumed, files bool, err error) {
	if !s.Dormant() {
		resumed, err := n.Resume(ctx, s, client, reason, life)
		return resumed, false, err
	}
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	ended, dormant, m := s.ended, s.dormant, s.kept
	s.mu.Unlock()
	switch {
	case ended:
		return false, false, s.EnterError()
	case !dormant:
		return false, false, nil // resumed meanwhile
	}
	scope := s.auditScope()
	sb, bind, err := n.claimBound(ctx, s.tool, &scope, s.narrowed)
	if err != nil {
		return false, false, err
	}
	st, err := n.keptStore()
	if err == nil {
		var closeDirs func()
		dirs, cd, derr := openSnapshotDirs(sb)
		closeDirs, err = cd, derr
		if err == nil {
			uid := sb.UserHostID()
			err = st.Restore(*m, dirs, uid, uid)
			closeDirs()
		}
	}
	if err != nil {
		_ = bind.Close(ctx)
		_ = sb.Destroy(context.WithoutCancel(ctx))
		n.opts.Logger.Warn("resume from kept files failed", "session", s.id, "err", err)
		return false, false, errdefs.Errorf(errdefs.ErrUnavailable, "session %s could not be resumed from its files; see the daemon's log", s.id)
	}
	now := time.Now()
	s.mu.Lock()
	pausedFor := now.Sub(s.pausedAt)
	s.sb, s.bind, s.dormant = sb, bind, false
	s.scope.sandbox = sb.ID()
	s.expires = now.Add(max(s.lifeLeft, life, minResumedLife))
	s.lastUsed = now
	release := s.unpause
	s.paused, s.unpause = false, nil
	s.mu.Unlock()
	release()
	n.dropKept(s)
	e := s.auditScope().event(audit.KindSessionResumed)
	e.Client = client
	e.Detail = audit.Detail(map[string]string{"reason": reason, "paused_for": pausedFor.Round(time.Millisecond).String(), "processes": "lost: resumed from its files"})
	n.audit.Record(e)
	return true, true, nil
}

// dormantError is the refusal of a plain resume of a dormant session.
func dormantError(s *Session) error {
	return fmt.Errorf("%w at %s: session %s kept its files only; resume it from them (native API: {\"files\": true}; E2B: connect with onResume \"reboot\")",
		ErrProcessesLost, s.pausedAt.UTC().Format(time.RFC3339), s.id)
}
