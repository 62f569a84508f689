// Package audit is the daemon's durable, append-only record of what it
// did: sandboxes created, claimed and destroyed, runs and their outcomes,
// limit breaches, egress, DNS and broker decisions, and API requests with
// the caller's identity. It is an embedded SQLite database (pure Go, no
// cgo) in WAL mode, written by one committer at a time that commits
// whatever has queued up in one transaction (group commit): the log's
// writer goroutine, or the goroutine waiting in an Append when nobody is
// committing (it commits for the writer, saving the hand-over to it and
// back).
//
// An event is acknowledged when Append returns nil: it is then in the
// database and survives a crash of the process (and, with SyncFull, of
// the host). Record queues an event without waiting; every event queued
// before an Append is committed no later than it.
package audit

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/api"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Event kinds. A kind filter also matches the kinds below it: "sandbox"
// matches "sandbox.created".
const (
	KindDaemonStarted    = "daemon.started"
	KindDaemonStopped    = "daemon.stopped"
	KindDaemonReloaded   = "daemon.reloaded"
	KindSandboxCreated   = "sandbox.created"
	KindSandboxClaimed   = "sandbox.claimed"
	KindSandboxDestroyed = "sandbox.destroyed"
	KindSandboxSwept     = "sandbox.swept"
	KindRunStarted       = "run.started"
	KindRunFinished      = "run.finished"
	KindLimit            = "limit.breach"
	KindEgress           = "egress"
	KindDNS              = "dns"
	KindBroker           = "broker"
	KindSessionCreated   = "session.created"
	KindSessionEnded     = "session.ended"
	KindFile             = "session.file"
	KindAPI              = "api.request"
	KindMCPCall          = "mcp.call"
	// KindKilled: a run or MCP server ended by airlock kill (DELETE
	// /v1/runs/{id}); its client is who asked.
	KindKilled = "run.killed"
	// KindCapped: a sandbox made more decisions than are recorded for
	// one sandbox; the rest are not in the log.
	KindCapped = "audit.capped"
	// KindCode: code run in a session's code interpreter (E2B's
	// runCode); its detail has the code (bounded) and how it ended.
	KindCode = "session.code"
	// KindPort: a request from outside to a server in a session's
	// sandbox (the E2B API's sandbox ports).
	KindPort = "session.port"
	// KindSessionPaused and KindSessionResumed: a session paused (its
	// sandbox frozen) and resumed, with who asked and why.
	KindSessionPaused  = "session.paused"
	KindSessionResumed = "session.resumed"
	// KindSessionForked: a session forked into new ones (each of which
	// records its own session.created and snapshot.restored).
	KindSessionForked = "session.forked"
	// KindSnapshotCreated, KindSnapshotRestored, KindSnapshotDeleted: a
	// session's files captured as a snapshot, one restored into a new
	// session, one deleted.
	KindSnapshotCreated  = "snapshot.created"
	KindSnapshotRestored = "snapshot.restored"
	KindSnapshotDeleted  = "snapshot.deleted"
	// KindVolumeCreated, KindVolumeAttached, KindVolumeDeleted: a volume
	// made, attached to a session's sandbox, deleted.
	KindVolumeCreated  = "volume.created"
	KindVolumeAttached = "volume.attached"
	KindVolumeDeleted  = "volume.deleted"
)

// Kinds are every kind of event, in the order above.
var Kinds = []string{
	KindDaemonStarted, KindDaemonStopped, KindDaemonReloaded, KindSandboxCreated, KindSandboxClaimed, KindSandboxDestroyed,
	KindSandboxSwept, KindRunStarted, KindRunFinished, KindLimit, KindEgress, KindDNS, KindBroker,
	KindSessionCreated, KindSessionEnded, KindFile, KindAPI, KindMCPCall, KindKilled, KindCapped,
	KindCode, KindPort, KindSessionPaused, KindSessionResumed, KindSessionForked,
	KindSnapshotCreated, KindSnapshotRestored, KindSnapshotDeleted,
	KindVolumeCreated, KindVolumeAttached, KindVolumeDeleted,
}

// KnownKind reports whether a kind filter can match anything: a kind, or
// the part of one before a dot ("sandbox").
func KnownKind(k string) bool {
	for _, kind := range Kinds {
		if k == kind || strings.HasPrefix(kind, k+".") {
			return true
		}
	}
	return false
}

// Decisions, for the kinds that decide.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Event is one audit record; the API carries it unchanged.
type Event = api.AuditEvent

// Sync modes.
const (
	// SyncNormal: a commit is written to the WAL before Append returns;
	// it survives a crash of the daemon, and the WAL is synced at each
	// checkpoint. SQLite's recommended setting for WAL.
	SyncNormal = "normal"
	// SyncFull: each commit is also fsynced, so it survives a crash of
	// the host, at the cost of one fsync per group commit.
	SyncFull = "full"
)

// Options configure a Log.
type Options struct {
	// Path is the database file; its directory is created (mode 0700).
	Path string
	// Retention is how long events are kept; 0 keeps them forever.
	Retention time.Duration
	// Sync is SyncNormal (default) or SyncFull.
	Sync string
	// Logger receives the log's own diagnostics; nil discards them.
	Logger *slog.Logger
	// Export, if set, receives every committed event as a JSON line (the
	// form GET /v1/audit answers with), in commit order: for a cluster's
	// log pipeline.
	Export io.Writer
	// Observe, if set, is called with every committed event, in commit
	// order, by whoever commits, before the events' Append returns: it
	// must be quick and never call the log (the node's metrics count
	// events there).
	Observe func(Event)
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("audit: log closed")

// maxBatch bounds the events committed in one transaction.
const maxBatch = 512

// queueCap bounds the items waiting for a commit: past it, Record and
// Append wait for room.
const queueCap = 1024

// item is one Append or Record waiting for the writer.
type item struct {
	events []Event
	done   chan error // nil for Record
}

// Log is an open audit log. Its methods are safe for concurrent use.
type Log struct {
	opts Options
	w    *sql.DB   // the writer's one connection
	wc   *sql.Conn // that connection, held from Open to Close
	ins  *sql.Stmt // the insert, prepared once on it
	r    *sql.DB   // readers

	// q holds what waits to be committed, oldest first, bounded by
	// slots (one token per item queued); qmu guards it. Items leave it
	// only under wmu, which whoever commits holds: the writer, or an
	// Append's waiter that commits for it (see Enqueue). So the log's
	// order is the queue's, whoever commits.
	qmu   sync.Mutex
	q     []item
	slots chan struct{}
	kick  chan struct{} // the writer has work (capacity 1)
	// lingering says a wake of the writer is due within recordLinger
	// for what Record queued (see Record); flush, that the wake has
	// come, and the writer is to commit what lingers (see write).
	lingering, flush atomic.Bool
	// wmu is held by whoever commits or prunes: one transaction at a
	// time on w and ins. It is taken before qmu and fmu.
	wmu    sync.Mutex
	stop   chan struct{} // closed by Close: the writer drains and exits
	done   chan struct{} // closed when the writer has exited
	closed atomic.Bool
	// mu is held for reading while queueing and for writing by Close
	// as it sets closed, so nothing is queued once the writer may have
	// drained for the last time. It is taken before qmu.
	mu sync.RWMutex

	last atomic.Int64 // the newest committed id
	lost atomic.Int64 // Recorded events that could not be written

	fmu     sync.Mutex    // guards failure and changed
	failure error         // the last write's error, nil once one succeeds
	changed chan struct{} // closed (and replaced) on every commit

	exp *exporter // Options.Export's, or nil
}

// Open opens (creating if needed) the log at opts.Path and starts its
// writer. It fails when the file cannot be opened or written: a daemon
// that cannot record must not start.
func Open(ctx context.Context, opts Options) (_ *Log, err error) {
	if opts.Path == "" {
		return nil, errors.New("audit: no path")
	}
	switch opts.Sync {
	case "":
		opts.Sync = SyncNormal
	case SyncNormal, SyncFull:
	default:
		return nil, fmt.Errorf("audit: sync %q: want %q or %q", opts.Sync, SyncNormal, SyncFull)
	}
	if opts.Retention < 0 {
		return nil, fmt.Errorf("audit: negative retention %s", opts.Retention)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	// The database holds who did what; only root reads it directly.
	if f, err := os.OpenFile(opts.Path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	} else {
		f.Close()
	}
	l := &Log{
		opts:    opts,
		slots:   make(chan struct{}, queueCap),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			l.closeDBs()
		}
	}()
	if l.w, err = sql.Open("sqlite", dsn(opts.Path, opts.Sync, false)); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l.w.SetMaxOpenConns(1)
	l.w.SetMaxIdleConns(1)
	l.w.SetConnMaxLifetime(0)
	if _, err = l.w.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", opts.Path, err)
	}
	// The writer's connection is held, so that its transactions are
	// plain statements on it: database/sql's Tx starts a goroutine for
	// every transaction, to watch a context that here cannot end.
	if l.wc, err = l.w.Conn(ctx); err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", opts.Path, err)
	}
	if l.ins, err = l.wc.PrepareContext(ctx, `INSERT INTO events (time, kind, tool, sandbox, session, run, client, decision, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if l.r, err = sql.Open("sqlite", dsn(opts.Path, opts.Sync, true)); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l.r.SetMaxOpenConns(4)
	var last int64
	if err = l.wc.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&last); err != nil {
		return nil, fmt.Errorf("audit: read %s: %w", opts.Path, err)
	}
	l.last.Store(last)
	if err = l.prune(ctx); err != nil {
		return nil, err
	}
	if opts.Export != nil {
		l.exp = newExporter(opts.Export, opts.Logger)
	}
	go l.write()
	return l, nil
}

const schema = `
CREATE TABLE IF NOT EXISTS events (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	time     INTEGER NOT NULL,
	kind     TEXT NOT NULL,
	tool     TEXT NOT NULL DEFAULT '',
	sandbox  TEXT NOT NULL DEFAULT '',
	session  TEXT NOT NULL DEFAULT '',
	run      TEXT NOT NULL DEFAULT '',
	client   TEXT NOT NULL DEFAULT '',
	decision TEXT NOT NULL DEFAULT '',
	detail   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_time ON events(time);
CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox) WHERE sandbox != '';
DROP INDEX IF EXISTS events_kind;
`

// The schema has no index on kind: a kind filter matches a kind or the
// kinds below it ("egress" and "egress.*"), which SQLite answers by the
// id order a query walks anyway, and an index on (kind, id), which logs
// made before had and no query used, cost each commit a leaf page per
// kind in the transaction: 40 % of a run's audit work
// (BenchmarkRunEvents). Opening an older log drops it.

func dsn(path, sync string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Append commits evs and returns once they are durable, or with the
// reason they are not. Every event queued before it is committed too;
// with no events it is a barrier that waits for them.
func (l *Log) Append(ctx context.Context, evs ...Event) error {
	wait, err := l.Enqueue(ctx, evs...)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Enqueue queues evs, in order after everything queued before, and
// returns a wait that returns once they are durable, or with the reason
// they are not: Append in two halves, for a caller with something to do
// in between (answer its client). A later Append, an empty one included,
// returns only after these are committed.
func (l *Log) Enqueue(ctx context.Context, evs ...Event) (wait func(context.Context) error, err error) {
	return l.enqueueWait(ctx, true, evs)
}

// EnqueueQuiet is Enqueue without waking the writer: the events' write
// starts when wait is called, or with the next write anyone else starts,
// whichever comes first. For a caller whose work in between (writing an
// answer) should not share the processors with a transaction. Queries
// see the events as soon as EnqueueQuiet returns, as they see anything
// queued. Call wait, or the events wait for the next write.
func (l *Log) EnqueueQuiet(ctx context.Context, evs ...Event) (wait func(context.Context) error, err error) {
	return l.enqueueWait(ctx, false, evs)
}

func (l *Log) enqueueWait(ctx context.Context, wake bool, evs []Event) (wait func(context.Context) error, err error) {
	done := make(chan error, 1)
	if err := l.enqueue(ctx, item{events: stamp(evs), done: done}, wake); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			done <- err // a second wait gets the same answer
			return err
		default:
		}
		// Nobody committing: this goroutine commits what is queued, its
		// own events included, rather than wake the writer and sleep
		// until it has (a hand-over between goroutines that, on a busy
		// processor, waits for this one to block).
		if l.wmu.TryLock() {
			l.commitUntil(done)
			l.wmu.Unlock()
			l.qmu.Lock()
			more := len(l.q) > 0
			l.qmu.Unlock()
			if more {
				l.wake()
			}
		} else {
			// The writer is busy, and may have looked at the queue
			// for the last time before these events were queued
			// quietly: it looks again.
			l.wake()
		}
		select {
		case err := <-done:
			done <- err
			return err
		case <-ctx.Done():
			// The events may still be committed; they are not acknowledged.
			return ctx.Err()
		}
	}, nil
}

// commitUntil commits queued batches, oldest first, until done has its
// answer or nothing is queued. The caller holds wmu.
func (l *Log) commitUntil(done chan error) {
	for len(done) == 0 {
		batch := l.take()
		if len(batch) == 0 {
			return
		}
		l.commit(batch)
	}
}

// Record queues evs without waiting. A failure to write them shows in
// Err and in the count Lost; it never blocks the caller beyond a full
// queue.
//
// Nobody waits for them, so they are not written at once: they go with
// the next transaction anyone starts (a run's start, which must be
// durable before the run, comes every few milliseconds on a busy node),
// or after recordLinger. A run's sandbox is created, claimed and
// destroyed around it, each recorded; written at once, each was a
// transaction of its own, and transactions were a tenth of the daemon's
// CPU under sustained load.
func (l *Log) Record(evs ...Event) {
	if err := l.Linger(context.Background(), evs...); err != nil {
		l.lost.Add(int64(len(evs)))
	}
}

// Linger is Record for a caller that handles the failure to queue evs
// itself (a failure to write them shows in Err and the daemon's log).
func (l *Log) Linger(ctx context.Context, evs ...Event) error {
	if err := l.enqueue(ctx, item{events: stamp(evs)}, false); err != nil {
		return err
	}
	if l.lingering.CompareAndSwap(false, true) {
		time.AfterFunc(recordLinger, func() {
			l.lingering.Store(false)
			l.flush.Store(true)
			l.wake()
		})
	}
	return nil
}

// recordLinger bounds how long what Record queued waits for another
// transaction to go with (a variable for tests).
var recordLinger = 10 * time.Millisecond

func stamp(evs []Event) []Event {
	now := time.Now()
	out := make([]Event, len(evs))
	for i, ev := range evs {
		if ev.Time.IsZero() {
			ev.Time = now
		}
		out[i] = ev
	}
	return out
}

func (l *Log) enqueue(ctx context.Context, it item, wake bool) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return ErrClosed
	}
	select {
	case l.slots <- struct{}{}:
	default:
		// Full: the writer makes room (quiet items do not wake it).
		l.wake()
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.qmu.Lock()
	l.q = append(l.q, it)
	l.qmu.Unlock()
	if wake {
		l.wake()
	}
	return nil
}

func (l *Log) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// due reports whether what is queued is to be committed now: someone
// waits for an item, or the queue is half full (a Record or Append
// waiting for room wakes the writer).
func (l *Log) due() bool {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if len(l.q) >= queueCap/2 {
		return true
	}
	for _, it := range l.q {
		if it.done != nil {
			return true
		}
	}
	return false
}

// take removes the oldest queued items, up to maxBatch events (at least
// one item), and frees their room. The caller holds wmu.
func (l *Log) take() []item {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	k, n := 0, 0
	for k < len(l.q) && (k == 0 || n+len(l.q[k].events) <= maxBatch) {
		n += len(l.q[k].events)
		k++
	}
	batch := append([]item(nil), l.q[:k]...)
	clear(l.q[:k])
	l.q = l.q[k:]
	for range k {
		<-l.slots
	}
	return batch
}

// Err is the error of the last write, nil when it succeeded.
func (l *Log) Err() error {
	l.fmu.Lock()
	defer l.fmu.Unlock()
	return l.failure
}

// Lost counts events given to Record that could not be written.
func (l *Log) Lost() int64 { return l.lost.Load() }

// Last is the id of the newest committed event.
func (l *Log) Last() int64 { return l.last.Load() }

// write is the writer: woken by each queueing, it commits what has
// queued, up to maxBatch events a transaction, and answers every waiter.
// What only lingers (Record, Linger) it leaves for the next commit anyone
// starts, or for the linger's own wake: woken by an Enqueue whose events
// their waiter committed meanwhile (see Enqueue), the writer found only
// other runs' lingering events, and committed them in a transaction of
// their own, two thirds of a transaction more for every run under
// sustained load.
func (l *Log) write() {
	defer close(l.done)
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	drain := func(all bool) {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		if l.flush.Swap(false) {
			all = true
		}
		for all || l.due() {
			batch := l.take()
			if len(batch) == 0 {
				return
			}
			l.commit(batch)
		}
	}
	for {
		select {
		case <-l.kick:
			drain(false)
		case <-prune.C:
			l.wmu.Lock()
			err := l.prune(context.Background())
			l.wmu.Unlock()
			if err != nil {
				l.opts.Logger.Warn("audit: retention", "err", err)
			}
		case <-l.stop:
			// Close holds mu: nothing more is queued; drain the rest.
			drain(true)
			return
		}
	}
}

func (l *Log) commit(batch []item) {
	n := 0
	for _, it := range batch {
		n += len(it.events)
	}
	if n == 0 {
		// Barriers only: what was queued before them has been written,
		// or failed with the last write's error.
		err := l.Err()
		for _, it := range batch {
			if it.done != nil {
				it.done <- err
			}
		}
		return
	}
	err := l.insert(batch)
	l.fmu.Lock()
	l.failure = err
	if err == nil {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	l.fmu.Unlock()
	if err == nil && l.opts.Observe != nil {
		// Before the waiters hear: an Append that returned has its
		// events observed.
		for _, it := range batch {
			for _, e := range it.events {
				l.opts.Observe(e)
			}
		}
	}
	for _, it := range batch {
		if it.done != nil {
			it.done <- err
		} else if err != nil {
			l.lost.Add(int64(len(it.events)))
		}
	}
	if err != nil {
		l.opts.Logger.Error("audit: write failed", "err", err, "events", len(batch))
		return
	}
	if l.exp != nil {
		l.export(batch)
	}
}

// export hands a committed batch's events to the exporter, one JSON line
// each.
func (l *Log) export(batch []item) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	n := 0
	for _, it := range batch {
		for i := range it.events {
			_ = enc.Encode(&it.events[i])
			n++
		}
	}
	if n > 0 {
		l.exp.send(b.Bytes(), n)
	}
}

func (l *Log) insert(batch []item) (err error) {
	// A context that cannot end: with one that can, the driver starts a
	// goroutine to interrupt each statement and database/sql one for the
	// transaction, nine a commit, and SQLite's statements here are short
	// (a stalled disk blocks in a system call, which an interrupt would
	// not end; a lock held by another process ends with busy_timeout).
	ctx := context.Background()
	if _, err := l.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("audit: begin: %w", err)
	}
	defer func() {
		if err != nil {
			// A failed COMMIT (the file busy past busy_timeout, say)
			// leaves the transaction open: it is ended here either way.
			_, _ = l.wc.ExecContext(ctx, "ROLLBACK")
		}
	}()
	var last int64
	for _, it := range batch {
		for i := range it.events {
			ev := &it.events[i]
			res, err := l.ins.ExecContext(ctx, ev.Time.UnixNano(), ev.Kind, ev.Tool, ev.Sandbox, ev.Session, ev.Run, ev.Client, ev.Decision, string(ev.Detail))
			if err != nil {
				return fmt.Errorf("audit: insert: %w", err)
			}
			if last, err = res.LastInsertId(); err != nil {
				return fmt.Errorf("audit: insert: %w", err)
			}
			ev.ID = last
		}
	}
	if _, err = l.wc.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("audit: commit: %w", err)
	}
	if last > 0 {
		l.last.Store(last)
	}
	return nil
}

// pruneEvery is how often events older than the retention are removed.
const pruneEvery = time.Hour

// prune removes events older than the retention, a bounded number per
// statement so the writer is never held for long.
func (l *Log) prune(ctx context.Context) error {
	if l.opts.Retention <= 0 {
		return nil
	}
	cut := time.Now().Add(-l.opts.Retention).UnixNano()
	for {
		res, err := l.wc.ExecContext(ctx, `DELETE FROM events WHERE id IN (SELECT id FROM events WHERE time < ? ORDER BY id LIMIT 10000)`, cut)
		if err != nil {
			return fmt.Errorf("audit: retention: %w", err)
		}
		if n, _ := res.RowsAffected(); n < 10000 {
			return nil
		}
	}
}

// Close commits everything queued, stops the writer and closes the
// database. Append after Close returns ErrClosed.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	first := !l.closed.Swap(true)
	l.mu.Unlock()
	if first {
		close(l.stop)
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("audit: close: %w", ctx.Err())
	}
	if !first {
		return nil
	}
	if l.exp != nil {
		l.exp.close(ctx)
	}
	return l.closeDBs()
}

// Reader reads a log file that another process (the daemon) may be
// writing: it never writes, creates or prunes anything.
type Reader struct{ l *Log }

// OpenReader opens the log at path for reading; the file must exist.
func OpenReader(path string) (*Reader, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path, SyncNormal, true))
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	db.SetMaxOpenConns(1)
	return &Reader{l: &Log{r: db}}, nil
}

// Query is Log.Query.
func (r *Reader) Query(ctx context.Context, q Query) ([]Event, error) { return r.l.Query(ctx, q) }

// Close closes the file.
func (r *Reader) Close() error { return r.l.r.Close() }

func (l *Log) closeDBs() error {
	var errs []error
	if l.ins != nil {
		errs = append(errs, l.ins.Close())
	}
	if l.wc != nil {
		errs = append(errs, l.wc.Close())
	}
	if l.r != nil {
		errs = append(errs, l.r.Close())
	}
	if l.w != nil {
		errs = append(errs, l.w.Close())
	}
	return errors.Join(errs...)
}
