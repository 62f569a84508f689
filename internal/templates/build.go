package templates

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/image/dockerfile"
	"github.com/airlockhq/airlock/internal/image/unpack"
	"github.com/airlockhq/airlock/internal/imagebuild"
)

// A build's status, as E2B names them.
const (
	StatusWaiting  = "waiting"
	StatusBuilding = "building"
	StatusReady    = "ready"
	StatusError    = "error"
)

// Step is one of E2B's template steps (TemplateStep).
type Step struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// Spec is what a build makes (E2B's TemplateBuildStartV2).
type Spec struct {
	FromImage    string `json:"fromImage"`
	FromTemplate string `json:"fromTemplate"`
	Steps        []Step `json:"steps"`
	Force        bool   `json:"force"`
}

// LogEntry is a line of a build's log.
type LogEntry struct {
	Time    time.Time
	Level   string // "info" or "error"
	Message string
	Step    string // the step's number, 1-based; "" for the build's own lines
}

// Build is one build of a template.
type Build struct {
	ID, Template, Owner string
	Tags                []string

	// What follows is guarded by the manager's mu.
	Status string
	// Reason says why a build failed, and FailedStep at which step
	// ("" for none).
	Reason, FailedStep string
	logs               []LogEntry
	logBytes           int
	dropped            int
	created            time.Time
	started            bool
}

// maxLogEntries and maxLogBytes bound one build's log (its memory: the
// node keeps maxBuilds of them); past either the first lines are kept,
// the rest counted, and the build's own last lines added all the same.
const (
	maxLogEntries = 20000
	maxLogBytes   = 2 << 20
)

// maxLogLine bounds one log line.
const maxLogLine = 4096

// Status is a build's status and its log from offset on.
type Status struct {
	Status, Reason, FailedStep string
	Logs                       []LogEntry
	// Tail is the last lines of the log (for a failure's reason).
	Tail []LogEntry
}

// Status is owner's build of templateID, its log from offset.
func (m *Manager) Status(owner, templateID, buildID string, offset int) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[buildID]
	if !ok || b.Owner != owner || b.Template != templateID {
		return Status{}, errdefs.Errorf(errdefs.ErrNotFound, "no build %q of template %q of this API key", clip(buildID), clip(templateID))
	}
	if offset < 0 {
		return Status{}, errdefs.New(errdefs.ErrInvalid, "logsOffset: want 0 or more")
	}
	st := Status{Status: b.Status, Reason: b.Reason, FailedStep: b.FailedStep}
	if offset < len(b.logs) {
		st.Logs = append([]LogEntry(nil), b.logs[offset:min(len(b.logs), offset+1000)]...)
	}
	if b.Status == StatusError {
		st.Tail = append([]LogEntry(nil), b.logs[max(0, len(b.logs)-20):]...)
	}
	return st, nil
}

// logf adds a line of the build's own to b's log, past its bounds too
// (a handful: the wait, the outcome).
func (m *Manager) logf(b *Build, level, step, format string, args ...any) {
	m.addLog(b, LogEntry{Time: time.Now().UTC(), Level: level, Step: step, Message: fmt.Sprintf(format, args...)}, true)
}

// addLog adds a line to b's log; a step's output (own false) only
// within the log's bounds.
func (m *Manager) addLog(b *Build, e LogEntry, own bool) {
	if len(e.Message) > maxLogLine {
		e.Message = e.Message[:maxLogLine] + "…"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !own && (len(b.logs) >= maxLogEntries || b.logBytes >= maxLogBytes) {
		b.dropped++
		return
	}
	if own && b.dropped > 0 {
		n := b.dropped
		b.dropped = 0
		b.logs = append(b.logs, LogEntry{Time: e.Time, Level: "info", Message: fmt.Sprintf("(%d lines of output left out of the log: over %d lines or %d bytes)", n, maxLogEntries, maxLogBytes)})
	}
	b.logs = append(b.logs, e)
	b.logBytes += len(e.Message)
}

// Start runs owner's requested build with spec, in the background; its
// status says how it goes.
func (m *Manager) Start(owner, templateID, buildID string, spec Spec, s Settings) error {
	steps, err := convert(spec.Steps)
	if err != nil {
		return err
	}
	m.mu.Lock()
	b, ok := m.builds[buildID]
	if !ok || b.Owner != owner || b.Template != templateID {
		m.mu.Unlock()
		return errdefs.Errorf(errdefs.ErrNotFound, "no build %q of template %q of this API key", clip(buildID), clip(templateID))
	}
	if b.started {
		m.mu.Unlock()
		return errdefs.Errorf(errdefs.ErrConflict, "build %s has started already: request a new one", buildID)
	}
	if m.closed {
		m.mu.Unlock()
		return errdefs.New(errdefs.ErrUnavailable, "the daemon is stopping: no build starts")
	}
	b.started = true
	if s.Concurrency < 1 {
		s.Concurrency = 1
	}
	// A reload that changes the concurrency makes a new semaphore: the
	// builds holding the old one finish on it.
	if m.sem == nil || cap(m.sem) != s.Concurrency {
		m.sem = make(chan struct{}, s.Concurrency)
	}
	sem := m.sem
	m.wg.Add(1) // under mu: never after Close's Wait began
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		m.logf(b, "info", "", "waiting for a build slot (%d at once)", s.Concurrency)
		select {
		case sem <- struct{}{}:
		case <-m.ctx.Done():
			m.finish(b, "", "", fmt.Errorf("the daemon stopped before the build started"))
			return
		}
		defer func() { <-sem }()
		m.setStatus(b, StatusBuilding)
		digest, err := m.run(b, spec, steps, s)
		var se *imagebuild.StepError
		step := ""
		if errors.As(err, &se) {
			step = fmt.Sprint(se.Step)
		}
		m.finish(b, digest, step, err)
		if s.CacheMax > 0 {
			if gone, freed, err := m.o.Store.TrimCache(s.CacheMax); err != nil {
				m.o.Logger.Warn("build cache not trimmed", "err", err)
			} else if len(gone) > 0 {
				m.o.Logger.Info("build cache trimmed", "images", len(gone), "bytes", freed)
			}
		}
	}()
	return nil
}

func (m *Manager) setStatus(b *Build, st string) {
	m.mu.Lock()
	b.Status = st
	m.mu.Unlock()
}

// finish records b's end: its tags point at digest, or it failed.
func (m *Manager) finish(b *Build, digest, step string, err error) {
	if err != nil {
		m.logf(b, "error", step, "build failed: %v", err)
		m.mu.Lock()
		b.Status, b.Reason, b.FailedStep = StatusError, err.Error(), step
		m.mu.Unlock()
		m.untag(b.Template, b.ID)
		return
	}
	m.mu.Lock()
	t, ok := m.templates[b.Template]
	var superseded []string
	if ok {
		now := time.Now().UTC()
		for _, tag := range b.Tags {
			if old, had := t.Tags[tag]; had {
				superseded = append(superseded, old.Build)
			}
			t.Tags[tag] = Tagged{Build: b.ID, Digest: digest, At: now}
		}
		if serr := m.save(); serr != nil {
			err = serr
		}
	} else {
		err = errors.New("the template was deleted while it was built")
	}
	// An older build no tag points at any more lets its image go.
	var drop []string
	if ok {
		for _, old := range superseded {
			if !tagged(t, old) && old != b.ID {
				drop = append(drop, old)
			}
		}
	}
	if err != nil {
		b.Status, b.Reason = StatusError, err.Error()
	} else {
		b.Status = StatusReady
	}
	m.mu.Unlock()
	for _, old := range drop {
		m.untag(b.Template, old)
	}
	if err != nil {
		m.untag(b.Template, b.ID)
		m.logf(b, "error", "", "build failed: %v", err)
		return
	}
	m.logf(b, "info", "", "build %s is ready: %s", b.ID, digest)
}

func tagged(t *Template, build string) bool {
	for _, tg := range t.Tags {
		if tg.Build == build {
			return true
		}
	}
	return false
}

// run builds the image of b and names it; m.mu is not held.
func (m *Manager) run(b *Build, spec Spec, steps []dockerfile.Step, s Settings) (string, error) {
	base, err := m.base(b.Owner, spec)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(m.o.Dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	lw := &logWriter{m: m, b: b}
	o := imagebuild.Options{Store: m.o.Store, Runtime: m.o.Runtime, Limits: s.Limits, Progress: lw,
		Name: imageName(b.Template, b.ID), CacheScope: "e2b:" + b.Owner,
		OnStep: func(i int) { lw.flush(); lw.setStep(fmt.Sprint(i + 1)) }}
	if s.Bind != nil {
		o.Bind = s.Bind(b.Owner, b.ID)
	}
	if spec.Force {
		o.NoCacheFrom = 1
	} else {
		for i, st := range spec.Steps {
			if st.Force {
				o.NoCacheFrom = i + 1
				break
			}
		}
	}
	contexts := map[int]string{}
	contextOf := func(i int) (string, error) {
		if dir, ok := contexts[i]; ok {
			return dir, nil
		}
		dir := filepath.Join(work, fmt.Sprint(i))
		if err := m.unpackUpload(b.Owner, spec.Steps[i].FilesHash, dir, s.Limits.Disk); err != nil {
			return "", err
		}
		contexts[i] = dir
		return dir, nil
	}
	res, err := imagebuild.BuildSteps(m.ctx, o, base, steps, contextOf)
	lw.flush()
	if err != nil {
		return "", err
	}
	m.logf(b, "info", "", "%d steps, %d from the cache", res.Steps, res.Cached)
	return res.Image.Digest, nil
}

// base is the image a build starts from: a template of the owner's, or
// an image of the store.
func (m *Manager) base(owner string, spec Spec) (*image.Image, error) {
	switch {
	case spec.FromTemplate != "":
		_, img, err := m.Find(owner, spec.FromTemplate)
		if err != nil {
			return nil, fmt.Errorf("fromTemplate: %w", err)
		}
		return img, nil
	default:
		img, err := m.o.Store.Resolve(spec.FromImage)
		if err != nil {
			return nil, fmt.Errorf("fromImage %s: %w (airlock builds from images in its store: import or pull it first, by that name)", clip(spec.FromImage), err)
		}
		return img, nil
	}
}

// unpackUpload unpacks owner's upload of hash into dir (made), by the
// store's confined unpacker: no entry leaves dir, none is a device or
// setuid, and at most limit bytes.
func (m *Manager) unpackUpload(owner, hash, dir string, limit int64) error {
	f, err := m.openUpload(owner, hash)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	u, err := unpack.New(dir, 0, unpack.Limits{Bytes: limit, Entries: 1 << 18})
	if err != nil {
		return err
	}
	defer u.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return errdefs.Errorf(errdefs.ErrInvalid, "the files of hash %s: %v", hash, err)
		}
		defer zr.Close()
		r = zr
	}
	if err := u.Apply(r, false); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "the files of hash %s: %v", hash, err)
	}
	return nil
}

// convert turns E2B's steps into the builder's.
func convert(in []Step) ([]dockerfile.Step, error) {
	if len(in) > 1000 {
		return nil, errdefs.New(errdefs.ErrInvalid, "steps: at most 1000")
	}
	var out []dockerfile.Step
	for i, st := range in {
		bad := func(format string, args ...any) error {
			return errdefs.Errorf(errdefs.ErrInvalid, "steps[%d] (%s): %s", i, clip(st.Type), fmt.Sprintf(format, args...))
		}
		text := st.Type
		for _, a := range st.Args {
			if a != "" {
				text += " " + a
			}
		}
		for _, a := range st.Args {
			if strings.ContainsRune(a, 0) {
				return nil, bad("an argument holds a NUL byte")
			}
		}
		switch st.Type {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || st.Args[0] == "" {
				return nil, bad("want the command and, perhaps, the user")
			}
			run := dockerfile.Step{Kind: dockerfile.Run, Text: text, Args: []string{"/bin/sh", "-c", st.Args[0]}}
			if len(st.Args) == 2 {
				run.User = st.Args[1] // its own; the USER in effect stays
			}
			out = append(out, run)
		case "COPY":
			if len(st.Args) < 2 || len(st.Args) > 4 || st.Args[0] == "" || st.Args[1] == "" {
				return nil, bad("want the source, the destination and, perhaps, the user and mode")
			}
			if !validHash(st.FilesHash) {
				return nil, bad("filesHash: want the sha256 of the files uploaded")
			}
			c := dockerfile.Step{Kind: dockerfile.Copy, Text: text, Sources: []string{st.Args[0]}, Dest: st.Args[1]}
			if len(st.Args) > 2 {
				c.Chown = st.Args[2]
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				if !validMode(st.Args[3]) {
					return nil, bad("mode %q: want an octal mode", clip(st.Args[3]))
				}
				c.Chmod = st.Args[3]
			}
			out = append(out, c)
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return nil, bad("want names and values in pairs")
			}
			e := dockerfile.Step{Kind: dockerfile.Env, Text: text}
			for j := 0; j < len(st.Args); j += 2 {
				if st.Args[j] == "" || strings.ContainsRune(st.Args[j], '=') {
					return nil, bad("%q is not a variable name", clip(st.Args[j]))
				}
				e.Pairs = append(e.Pairs, dockerfile.KV{Key: st.Args[j], Value: st.Args[j+1], HasValue: true})
			}
			out = append(out, e)
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, bad("want one directory")
			}
			out = append(out, dockerfile.Step{Kind: dockerfile.Workdir, Text: text, Value: st.Args[0]})
		case "USER":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, bad("want one user")
			}
			out = append(out, dockerfile.Step{Kind: dockerfile.User, Text: text, Value: st.Args[0]})
		default:
			return nil, bad("airlock builds RUN, COPY, ENV, WORKDIR and USER steps")
		}
	}
	return out, nil
}

func validMode(s string) bool {
	if len(s) == 0 || len(s) > 4 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '7' {
			return false
		}
	}
	return true
}

// logWriter turns a build's progress into log lines of the step
// running.
type logWriter struct {
	m    *Manager
	b    *Build
	mu   sync.Mutex
	step string
	buf  []byte
}

func (w *logWriter) setStep(s string) {
	w.mu.Lock()
	w.step = s
	w.mu.Unlock()
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLogLine {
		w.emit(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = w.buf[:0]
	}
}

// emit adds a line; w.mu is held.
func (w *logWriter) emit(line string) {
	w.m.addLog(w.b, LogEntry{Time: time.Now().UTC(), Level: "info", Step: w.step, Message: strings.TrimRight(line, "\r")}, false)
}
