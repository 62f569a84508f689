// Package templates builds and keeps the E2B templates of a node's API
// keys (the Template SDK's Template.build; docs/decisions/0034): a
// build's steps run in airlock sandboxes through imagebuild, its COPY
// sources are the archives the SDK uploads by content hash, and a
// template is a name of its owner's for an image of the store.
//
// Everything is its owner's (a token's): a template, its builds, its
// uploads and its build cache are never found by another token, and
// answer as if they were not there.
package templates

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/sandbox"
)

// Options configure a Manager.
type Options struct {
	// Dir holds templates.json and the uploads; made if missing.
	Dir     string
	Store   *image.Store
	Runtime *sandbox.Runtime
	Logger  *slog.Logger
}

// Settings are the config's builds section, as the runtime takes it.
type Settings struct {
	Limits      sandbox.Limits
	Concurrency int
	UploadMax   int64
	// CacheMax is the build cache's ceiling (image.Store.TrimCache),
	// trimmed after each build; 0 trims nothing.
	CacheMax int64
	// Bind binds a step's sandbox to the build's egress policy, its
	// decisions recorded for owner and build; nil: no network.
	Bind func(owner, build string) func(context.Context, *sandbox.Sandbox) (*runner.Binding, error)
}

// Template is a name of its owner's for the images of its builds.
type Template struct {
	ID      string    `json:"id"`
	Owner   string    `json:"owner"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Tags map a tag to its build; "default" is the name's own.
	Tags map[string]Tagged `json:"tags"`
}

// Tagged is a finished build a tag points at.
type Tagged struct {
	Build  string    `json:"build"`
	Digest string    `json:"digest"`
	At     time.Time `json:"at"`
}

// DefaultTag is the tag of a name given without one.
const DefaultTag = "default"

// Manager keeps a node's templates and runs their builds.
type Manager struct {
	o Options

	ctx    context.Context // ends at Close: every build is cancelled
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards what follows, and templates.json
	closed bool
	// sem holds a slot per build running (builds.concurrency).
	sem       chan struct{}
	templates map[string]*Template
	builds    map[string]*Build
	uploads   map[string]*pendingUpload
}

// Open reads the templates kept in o.Dir.
func Open(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "uploads"), 0o700); err != nil {
		return nil, err
	}
	m := &Manager{o: o, templates: map[string]*Template{}, builds: map[string]*Build{}, uploads: map[string]*pendingUpload{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	b, err := os.ReadFile(filepath.Join(o.Dir, "templates.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		var list []*Template
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(o.Dir, "templates.json"), err)
		}
		for _, t := range list {
			m.templates[t.ID] = t
		}
	}
	return m, nil
}

// Close cancels the builds running and waits for them to end (their
// sandboxes destroyed); no build starts after.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// save writes templates.json; m.mu is held.
func (m *Manager) save() error {
	list := make([]*Template, 0, len(m.templates))
	for _, t := range m.templates {
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *Template) int { return strings.Compare(a.ID, b.ID) })
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(m.o.Dir, ".templates.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(m.o.Dir, "templates.json"))
}

func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID is a random (version 4) UUID, as E2B's build ids are.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// SplitName splits "name:tag"; a name alone has DefaultTag.
func SplitName(s string) (name, tag string, err error) {
	name, tag, hasTag := strings.Cut(s, ":")
	if !hasTag {
		tag = DefaultTag
	}
	if !validName(name) || !validName(tag) {
		return "", "", errdefs.Errorf(errdefs.ErrInvalid, "template name %q: want NAME or NAME:TAG, each 1-64 lower-case letters, digits, '.', '_' or '-'", clip(s))
	}
	return name, tag, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// byName is owner's template named name; m.mu is held.
func (m *Manager) byName(owner, name string) *Template {
	for _, t := range m.templates {
		if t.Owner == owner && t.Name == name {
			return t
		}
	}
	return nil
}

// lookup is owner's template by id or name ("name:tag" too) and the tag
// asked for; m.mu is held. Another owner's is not found.
func (m *Manager) lookup(owner, ref string) (*Template, string) {
	if t, ok := m.templates[ref]; ok && t.Owner == owner {
		return t, DefaultTag
	}
	name, tag, err := SplitName(ref)
	if err != nil {
		return nil, ""
	}
	return m.byName(owner, name), tag
}

// Requested is a build made ready by Request.
type Requested struct {
	TemplateID, BuildID string
	Name                string
	Tags                []string
}

// Request makes owner's template named name (or finds it) and a build
// of it, waiting for its steps (Start): E2B's POST /v3/templates.
func (m *Manager) Request(owner, name string, tags []string) (Requested, error) {
	name, tag, err := SplitName(name)
	if err != nil {
		return Requested{}, err
	}
	all := []string{tag}
	for _, t := range tags {
		if !validName(t) {
			return Requested{}, errdefs.Errorf(errdefs.ErrInvalid, "tag %q: want 1-64 lower-case letters, digits, '.', '_' or '-'", clip(t))
		}
		if !slices.Contains(all, t) {
			all = append(all, t)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	waiting, owned := 0, 0
	for _, b := range m.builds {
		if b.Owner == owner && !b.started {
			waiting++
		}
	}
	for _, t := range m.templates {
		if t.Owner == owner {
			owned++
		}
	}
	if waiting >= maxRequested {
		return Requested{}, errdefs.Errorf(errdefs.ErrLimit, "%d builds of this API key are requested and not started: start them or wait a day", maxRequested)
	}
	t := m.byName(owner, name)
	if t == nil && owned >= maxTemplates {
		return Requested{}, errdefs.Errorf(errdefs.ErrLimit, "this API key has %d templates, the most it may: delete one first", maxTemplates)
	}
	if t == nil {
		t = &Template{ID: randomID(10), Owner: owner, Name: name, Created: time.Now().UTC(), Tags: map[string]Tagged{}}
		m.templates[t.ID] = t
		if err := m.save(); err != nil {
			delete(m.templates, t.ID)
			return Requested{}, err
		}
	}
	m.pruneBuilds()
	b := &Build{ID: newUUID(), Template: t.ID, Owner: owner, Tags: all, Status: StatusWaiting, created: time.Now()}
	m.builds[b.ID] = b
	return Requested{TemplateID: t.ID, BuildID: b.ID, Name: name, Tags: all}, nil
}

// maxBuilds bounds the builds remembered (their status and logs); the
// oldest finished go first. maxRequested bounds one owner's builds
// requested and not started, maxTemplates its templates.
const (
	maxBuilds    = 128
	maxRequested = 16
	maxTemplates = 1000
)

// pruneBuilds forgets the oldest finished builds past maxBuilds, and
// requested builds never started after a day; m.mu is held.
func (m *Manager) pruneBuilds() {
	for id, b := range m.builds {
		if b.Status == StatusWaiting && !b.started && time.Since(b.created) > 24*time.Hour {
			delete(m.builds, id)
		}
	}
	if len(m.builds) < maxBuilds {
		return
	}
	var done []*Build
	for _, b := range m.builds {
		if b.Status == StatusReady || b.Status == StatusError {
			done = append(done, b)
		}
	}
	slices.SortFunc(done, func(a, b *Build) int { return a.created.Compare(b.created) })
	for _, b := range done[:max(0, len(m.builds)-maxBuilds+1)] {
		delete(m.builds, b.ID)
	}
}

// Find is the image of owner's template ref (its id, name or
// name:tag): the build its tag points at.
func (m *Manager) Find(owner, ref string) (*Template, *image.Image, error) {
	m.mu.Lock()
	t, tag := m.lookup(owner, ref)
	var tg Tagged
	ok := false
	if t != nil {
		tg, ok = t.Tags[tag]
	}
	m.mu.Unlock()
	if t == nil {
		return nil, nil, errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(ref))
	}
	if !ok {
		return nil, nil, errdefs.Errorf(errdefs.ErrNotFound, "template %s has no finished build tagged %q", t.Name, tag)
	}
	img, err := m.o.Store.Resolve(tg.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("template %s:%s: its image %s: %w", t.Name, tag, tg.Digest, err)
	}
	return t, img, nil
}

// Get is owner's template by id or name, for the alias check.
func (m *Manager) Get(owner, ref string) (*Template, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, _ := m.lookup(owner, ref)
	if t == nil {
		return nil, false
	}
	c := *t
	return &c, true
}

// imageName is the store's name of a template's build: it holds the
// image while a tag points at it.
func imageName(templateID, build string) string {
	return "airlock-template/" + templateID + ":" + build
}

// Delete removes owner's template ref (id or name); its images are then
// the build cache's, and go with its trim.
func (m *Manager) Delete(owner, ref string) error {
	m.mu.Lock()
	t, _ := m.lookup(owner, ref)
	if t == nil {
		m.mu.Unlock()
		return errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(ref))
	}
	delete(m.templates, t.ID)
	err := m.save()
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for _, b := range distinctBuilds(t) {
		m.untag(t.ID, b)
	}
	return nil
}

func distinctBuilds(t *Template) []string {
	var out []string
	for _, tg := range t.Tags {
		if !slices.Contains(out, tg.Build) {
			out = append(out, tg.Build)
		}
	}
	return out
}

// untag drops the store's name of a build's image, never the content a
// sandbox of the template may be running on: the build cache holds it
// then, and its trim (or a gc) reclaims it.
func (m *Manager) untag(templateID, build string) {
	if err := m.o.Store.Untag(imageName(templateID, build)); err != nil {
		m.o.Logger.Warn("template image not untagged", "template", templateID, "build", build, "err", err)
	}
}

// TagInfo is a tag of a template and the build it points at.
type TagInfo struct {
	Tag, Build string
	At         time.Time
}

// AssignTags points tags of owner's template at the build target
// ("name:tag") points at, and returns that build.
func (m *Manager) AssignTags(owner, target string, tags []string) (string, error) {
	if len(tags) == 0 || len(tags) > 32 {
		return "", errdefs.New(errdefs.ErrInvalid, "tags: 1 to 32")
	}
	for _, tg := range tags {
		if !validName(tg) {
			return "", errdefs.Errorf(errdefs.ErrInvalid, "tag %q: want 1-64 lower-case letters, digits, '.', '_' or '-'", clip(tg))
		}
	}
	name, tag, err := SplitName(target)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.byName(owner, name)
	if t == nil {
		return "", errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(name))
	}
	src, ok := t.Tags[tag]
	if !ok {
		return "", errdefs.Errorf(errdefs.ErrNotFound, "template %s has no build tagged %q", t.Name, tag)
	}
	old := maps.Clone(t.Tags)
	now := time.Now().UTC()
	for _, tg := range tags {
		t.Tags[tg] = Tagged{Build: src.Build, Digest: src.Digest, At: now}
	}
	if err := m.save(); err != nil {
		t.Tags = old
		return "", err
	}
	m.untagUnused(t, old)
	return src.Build, nil
}

// RemoveTags removes tags of owner's template name; a build no tag
// points at any more lets its image go (untag).
func (m *Manager) RemoveTags(owner, name string, tags []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.byName(owner, name)
	if t == nil {
		return errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(name))
	}
	for _, tg := range tags {
		if _, ok := t.Tags[tg]; !ok {
			return errdefs.Errorf(errdefs.ErrNotFound, "template %s has no tag %q", t.Name, clip(tg))
		}
	}
	old := maps.Clone(t.Tags)
	for _, tg := range tags {
		delete(t.Tags, tg)
	}
	if err := m.save(); err != nil {
		t.Tags = old
		return err
	}
	m.untagUnused(t, old)
	return nil
}

// untagUnused untags the images of the builds old's tags pointed at and
// t's no longer do; m.mu is held.
func (m *Manager) untagUnused(t *Template, old map[string]Tagged) {
	for _, tg := range old {
		if !tagged(t, tg.Build) {
			m.untag(t.ID, tg.Build)
		}
	}
}

// Tags are owner's template ref's tags, by name.
func (m *Manager) Tags(owner, ref string) ([]TagInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, _ := m.lookup(owner, ref)
	if t == nil {
		return nil, errdefs.Errorf(errdefs.ErrNotFound, "no template %q of this API key", clip(ref))
	}
	out := make([]TagInfo, 0, len(t.Tags))
	for _, tg := range slices.Sorted(maps.Keys(t.Tags)) {
		out = append(out, TagInfo{Tag: tg, Build: t.Tags[tg].Build, At: t.Tags[tg].At})
	}
	return out, nil
}
