package e2bserver

import (
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/linux/dirwatch"
	"github.com/airlockhq/airlock/internal/linux/inroot"
	"github.com/airlockhq/airlock/internal/node"
)

// Bounds of filesystem.Filesystem/WatchDir: each stream holds an
// inotify instance, and the host's root has fs.inotify.max_user_instances
// of them (128 by default) for every program it runs.
const (
	// MaxWatchesPerSandbox bounds one sandbox's watches.
	MaxWatchesPerSandbox = 8
	// maxWatches bounds the node's.
	maxWatches = 48
)

// watchEventType is the E2B (protobuf JSON) name of each change.
var watchEventType = map[dirwatch.Op]string{
	dirwatch.Create: "EVENT_TYPE_CREATE",
	dirwatch.Write:  "EVENT_TYPE_WRITE",
	dirwatch.Remove: "EVENT_TYPE_REMOVE",
	dirwatch.Rename: "EVENT_TYPE_RENAME",
	dirwatch.Chmod:  "EVENT_TYPE_CHMOD",
}

type watchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	// IncludeEntry asks for each event's entry (eventEntry).
	IncludeEntry bool `json:"includeEntry"`
	// AllowNetworkMounts lets envd watch an NFS, SMB or FUSE mount,
	// which it refuses otherwise; a sandbox has none, so it changes
	// nothing.
	AllowNetworkMounts bool `json:"allowNetworkMounts"`
}

// watchEvent is envd's FilesystemEvent.
type watchEvent struct {
	Name  string         `json:"name"`
	Type  string         `json:"type"`
	Entry *e2b.EntryInfo `json:"entry,omitempty"`
}

// eventEntry is the entry of ev, below the watched loc, as envd attaches
// it: to a create, write or chmod only (after a remove or rename the name
// no longer names the entry, and describing what took its place would
// mislead), and only when it can still be described (nil if it is gone
// meanwhile), found as any file call finds it.
func (sb *e2bSandbox) eventEntry(loc e2bLoc, ev dirwatch.Event) *e2b.EntryInfo {
	if ev.Op != dirwatch.Create && ev.Op != dirwatch.Write && ev.Op != dirwatch.Chmod {
		return nil
	}
	if checkRel(ev.Name) != nil || !sb.s.Enter() {
		return nil
	}
	defer sb.s.Leave()
	rel := ev.Name
	if loc.rel != "" {
		rel = loc.rel + "/" + ev.Name
	}
	var info *e2b.EntryInfo
	_ = sb.inDir(loc.dir, func(ws *os.File, _ int, d *describer) error {
		e, err := inroot.Stat(ws, rel)
		if err == nil {
			i := d.entry(ws, loc.dir, e)
			info = &i
		}
		return err
	})
	return info
}

// e2bWatchDir serves filesystem.Filesystem/WatchDir: a stream that says
// it started, then carries each change below the directory (names
// relative to it), until the client goes away, its Connect-Timeout-Ms
// passes, the directory is removed or the sandbox ends.
func (d *Server) e2bWatchDir(w http.ResponseWriter, r *http.Request) {
	st := &e2bStream{w: w, out: httpx.NewStream(w, d.opts.StallTimeout)}
	sb, err := d.e2bEnvd(r)
	if err != nil {
		st.end(err)
		return
	}
	var req watchRequest
	if err := e2b.ReadRequest(r.Body, &req); err != nil {
		st.end(err)
		return
	}
	loc, err := sb.fsPath(req.Path)
	if err != nil {
		st.end(err)
		return
	}
	if err := loc.writable(); err != nil {
		st.end(err)
		return
	}
	life, err := connectTimeout(r)
	if err != nil {
		st.end(err)
		return
	}
	release, err := d.e2bWatchSlot(sb)
	if err != nil {
		st.end(err)
		return
	}
	defer release()
	wt, err := sb.watch(loc, req.Recursive)
	if err != nil {
		st.end(e2bFSError(req.Path, err))
		return
	}
	defer wt.Close()
	st.write(0, map[string]any{"start": struct{}{}}, true)

	events, errc, done := make(chan dirwatch.Event), make(chan error, 1), make(chan struct{})
	defer close(done)
	go func() {
		for {
			ev, err := wt.Next()
			if err != nil {
				errc <- err
				return
			}
			select {
			case events <- ev:
			case <-done:
				return
			}
		}
	}()
	var deadline <-chan time.Time
	if life > 0 {
		t := time.NewTimer(life)
		defer t.Stop()
		deadline = t.C
	}
	ka := time.NewTicker(keepaliveEvery)
	defer ka.Stop()
	for {
		select {
		case ev := <-events:
			fe := watchEvent{Name: ev.Name, Type: watchEventType[ev.Op]}
			if req.IncludeEntry {
				fe.Entry = sb.eventEntry(loc, ev)
			}
			st.write(0, map[string]any{"filesystem": fe}, true)
		case err := <-errc:
			switch {
			case errors.Is(err, dirwatch.ErrGone):
				st.end(errdefs.Errorf(errdefs.ErrNotFound, "%s: the watched directory was removed", node.Shorten(req.Path)))
			default:
				st.end(e2bFSError(req.Path, err))
			}
			return
		case <-sb.s.Ending():
			st.end(errEnded)
			return
		case <-deadline:
			st.end(errdefs.Errorf(errTimedOut, "the watch's timeout of %v passed", life))
			return
		case <-ka.C:
			st.write(0, map[string]any{"keepalive": struct{}{}}, true)
		case <-r.Context().Done():
			return
		}
	}
}

// e2bWatchSlot takes one of the daemon's and one of sb's watches; the
// returned func gives them back.
func (d *Server) e2bWatchSlot(sb *e2bSandbox) (release func(), err error) {
	d.e2b.mu.Lock()
	defer d.e2b.mu.Unlock()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	switch {
	case sb.watches >= MaxWatchesPerSandbox:
		return nil, errdefs.Errorf(errdefs.ErrLimit, "a sandbox may have %d directory watches at once; stop one first", MaxWatchesPerSandbox)
	case d.e2b.watches >= maxWatches:
		return nil, errdefs.Errorf(errBusy, "this airlock serves %d directory watches at once, all in use; try again later", maxWatches)
	}
	sb.watches++
	d.e2b.watches++
	return func() {
		d.e2b.mu.Lock()
		defer d.e2b.mu.Unlock()
		sb.mu.Lock()
		defer sb.mu.Unlock()
		sb.watches--
		d.e2b.watches--
	}, nil
}

// watch starts watching rel below the workspace, as the sandbox's user.
func (sb *e2bSandbox) watch(loc e2bLoc, recursive bool) (*dirwatch.Watcher, error) {
	if !sb.s.Enter() {
		return nil, node.ErrGone
	}
	defer sb.s.Leave()
	ws, err := sb.s.Sandbox().OpenDir(loc.dir)
	if err != nil {
		return nil, node.ErrGone
	}
	defer ws.Close()
	id := sb.s.Sandbox().UserHostID()
	return dirwatch.Watch(ws, loc.rel, dirwatch.Options{Recursive: recursive, UID: id, GID: id})
}
