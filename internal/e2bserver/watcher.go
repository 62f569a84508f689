package e2bserver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/dirwatch"
	"github.com/airlockhq/airlock/internal/node"
)

// A polled watch: filesystem.Filesystem/CreateWatcher starts watching a
// directory, GetWatcherEvents takes the changes seen since the call
// before, RemoveWatcher stops it. The Python SDK's synchronous client
// watches so (its WatchHandle); the streamed WatchDir is the others'.
// A watcher holds one of the watches a sandbox and the node may have
// (e2bWatchSlot), until it is removed, fails, or its sandbox ends.

// Bounds of a watcher's changes not yet taken: past them, rather than
// drop changes silently, the watcher fails, and its next
// GetWatcherEvents says so.
const (
	maxWatcherEvents = 4096
	maxWatcherBytes  = 1 << 20
)

// e2bWatcher is one polled watch.
type e2bWatcher struct {
	path string // as the client named it, for its errors
	wt   *dirwatch.Watcher
	// loc is the directory watched; with entry, each event carries its
	// entry (eventEntry).
	loc   e2bLoc
	entry bool

	mu     sync.Mutex // guards the fields below
	events []watchEvent
	bytes  int
	err    error // why it stopped watching, once it has
	closed bool
}

// close stops the watch (once); the slot is given back by its reader.
func (w *e2bWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.wt.Close()
	}
}

// fail records why the watch stopped, if nothing did before.
func (w *e2bWatcher) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.close()
}

// read takes w's changes until the watch ends, then gives its slot back.
func (w *e2bWatcher) read(sb *e2bSandbox, release func()) {
	defer release()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-sb.s.Ending():
			w.fail(errEnded)
		case <-stop:
		}
	}()
	for {
		ev, err := w.wt.Next()
		if err != nil {
			switch {
			case errors.Is(err, dirwatch.ErrGone):
				w.fail(errdefs.Errorf(errdefs.ErrNotFound, "%s: the watched directory was removed", node.Shorten(w.path)))
			default:
				w.fail(e2bFSError(w.path, err))
			}
			return
		}
		fe := watchEvent{Name: ev.Name, Type: watchEventType[ev.Op]}
		n := len(ev.Name)
		if w.entry {
			fe.Entry = sb.eventEntry(w.loc, ev)
			n += entryBytes(fe.Entry)
		}
		w.mu.Lock()
		if len(w.events) >= maxWatcherEvents || w.bytes+n > maxWatcherBytes {
			w.mu.Unlock()
			w.fail(errdefs.Errorf(errdefs.ErrLimit, "%s: more than %d changes came before they were taken; the watcher was stopped rather than drop them", node.Shorten(w.path), maxWatcherEvents))
			return
		}
		w.events = append(w.events, fe)
		w.bytes += n
		w.mu.Unlock()
	}
}

func (d *Server) e2bCreateWatcher(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	var req watchRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	loc, err := sb.fsPath(req.Path)
	if err != nil {
		return nil, err
	}
	if err := loc.writable(); err != nil {
		return nil, err
	}
	release, err := d.e2bWatchSlot(sb)
	if err != nil {
		return nil, err
	}
	wt, err := sb.watch(loc, req.Recursive)
	if err != nil {
		release()
		return nil, e2bFSError(req.Path, err)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	w := &e2bWatcher{path: req.Path, wt: wt, loc: loc, entry: req.IncludeEntry}
	sb.mu.Lock()
	if sb.watchers == nil {
		sb.watchers = map[string]*e2bWatcher{}
	}
	sb.watchers[id] = w
	sb.mu.Unlock()
	go w.read(sb, release)
	return map[string]string{"watcherId": id}, nil
}

// watcherOf is the sandbox's watcher a request names.
func (sb *e2bSandbox) watcherOf(body []byte) (string, *e2bWatcher, error) {
	var req struct {
		WatcherID string `json:"watcherId"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "", nil, errdefs.Errorf(errdefs.ErrInvalid, "request: %s", httpx.DescribeJSON(err))
	}
	sb.mu.Lock()
	w := sb.watchers[req.WatcherID]
	sb.mu.Unlock()
	if w == nil {
		return "", nil, errdefs.Errorf(errdefs.ErrNotFound, "watcher %q not found", node.Shorten(req.WatcherID))
	}
	return req.WatcherID, w, nil
}

// e2bWatcherEvents answers the changes seen since the call before. Once
// the watcher has stopped, the changes it saw are answered, then why it
// stopped, and it is gone.
func (d *Server) e2bWatcherEvents(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	id, w, err := sb.watcherOf(body)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs, why := w.events, w.err
	w.events, w.bytes = nil, 0
	w.mu.Unlock()
	if len(evs) == 0 && why != nil {
		sb.mu.Lock()
		delete(sb.watchers, id)
		sb.mu.Unlock()
		return nil, why
	}
	if evs == nil {
		evs = []watchEvent{}
	}
	return map[string]any{"events": evs}, nil
}

func (d *Server) e2bRemoveWatcher(r *http.Request, sb *e2bSandbox, body []byte) (any, error) {
	id, w, err := sb.watcherOf(body)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	delete(sb.watchers, id)
	sb.mu.Unlock()
	w.close()
	return struct{}{}, nil
}

// entryBytes is about what e takes held in memory: its strings, and the
// rest at most a few hundred bytes.
func entryBytes(e *e2b.EntryInfo) int {
	if e == nil {
		return 0
	}
	n := 256 + len(e.Name) + len(e.Path) + len(e.Owner) + len(e.Group)
	if e.SymlinkTarget != nil {
		n += len(*e.SymlinkTarget)
	}
	for k, v := range e.Metadata {
		n += len(k) + len(v)
	}
	return n
}
