package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/sandbox"
)

// Volumes (docs/decisions/0028): named, size-bounded file systems that
// outlive sessions, each its owner's only (a token's, or the local
// socket's), attached writable where a session asks. A session with
// volumes gets a sandbox made for it (a warm one was built without
// them), as fresh as any.

// Defaults of the volumes' ceilings (server.capacity).
const (
	DefaultMaxVolumes  = 64
	DefaultVolumeBytes = 64 << 30
	// maxSessionVolumes bounds the volumes of one session.
	maxSessionVolumes = 8
)

// VolumeMount asks for a volume (by id or name) at Path in a session.
type VolumeMount struct {
	Volume string
	Path   string
}

// volumes is the node's volume manager, opened on first use.
type volumes struct {
	mu sync.Mutex // guards m and held, and orders creates' ceiling checks
	m  *volume.Manager
	// held are the releases of the tools' volumes, in use while the
	// node runs.
	held []func()
}

func (n *Node) volManager() (*volume.Manager, error) {
	n.vols.mu.Lock()
	defer n.vols.mu.Unlock()
	return n.volManagerLocked()
}

func (n *Node) volManagerLocked() (*volume.Manager, error) {
	if n.vols.m == nil {
		dir := n.opts.VolumeStore
		if dir == "" {
			dir = n.opts.Config.Images.Volumes
		}
		if dir == "" {
			dir = config.DefaultVolumes
		}
		m, err := volume.Open(dir)
		if err != nil {
			n.opts.Logger.Error("the volume store cannot be opened", "err", err)
			return nil, errdefs.New(errdefs.ErrUnavailable, "the node's volume store cannot be opened; see the daemon's log")
		}
		n.vols.m = m
	}
	return n.vols.m, nil
}

// toolVolumes makes, if they are not there, and mounts the volumes the
// tools declare (config: a tool's volumes), and adds them to the tools'
// specs: every sandbox of such a tool, warm ones included, gets them,
// whoever calls it (the config shares them). They are in use while the
// node runs. Before the pools start: New's for every tool, a reload's
// for those it adds or changes, in its generation ts.
func (n *Node) toolVolumes(ctx context.Context, ts *toolset, tools []*config.Tool) error {
	for _, t := range tools {
		if len(t.Volumes) == 0 {
			continue
		}
		m, err := n.volManager()
		if err != nil {
			return fmt.Errorf("tool %s: volumes: %w", t.Name, err)
		}
		owner := "tool:" + t.Name
		plan := ts.plans[t.Name]
		vols := slices.Clone(plan.Spec.Volumes)
		for _, tv := range t.Volumes {
			meta, err := m.Find(tv.Name, func(o string) bool { return o == owner })
			if errors.Is(err, volume.ErrNotFound) {
				size := tv.Size
				if size == 0 {
					size = volume.DefaultSize
				}
				meta, err = m.Create(ctx, volume.Meta{ID: n.newVolumeID(), Name: tv.Name, Owner: owner, Size: size, Created: time.Now().UTC()})
				if err == nil {
					e := audit.Event{Kind: audit.KindVolumeCreated, Tool: t.Name, Client: "config"}
					e.Detail = audit.Detail(map[string]any{"volume": meta.ID, "name": meta.Name, "bytes": meta.Size})
					n.audit.Record(e)
				}
			}
			if err != nil {
				return fmt.Errorf("tool %s: volume %s: %w", t.Name, tv.Name, err)
			}
			dir, release, err := m.Use(meta.ID)
			if err != nil {
				return fmt.Errorf("tool %s: volume %s: %w", t.Name, tv.Name, err)
			}
			n.vols.held = append(n.vols.held, release)
			vols = append(vols, sandbox.Volume{Dir: dir, Target: tv.Path, Size: meta.Size})
		}
		plan.Spec.Volumes = vols
		ts.plans[t.Name] = plan
	}
	return nil
}

// closeVolumes unmounts the volumes no sandbox holds, at stop.
func (n *Node) closeVolumes() {
	n.vols.mu.Lock()
	defer n.vols.mu.Unlock()
	for _, release := range n.vols.held {
		release()
	}
	n.vols.held = nil
	if n.vols.m != nil {
		if err := n.vols.m.Close(); err != nil {
			n.opts.Logger.Warn("volumes left mounted", "err", err)
		}
	}
}

func (n *Node) newVolumeID() string {
	var b [12]byte
	rand.Read(b[:])
	if n.name != "" {
		return "vol_" + n.name + "-" + hex.EncodeToString(b[:])
	}
	return "vol_" + hex.EncodeToString(b[:])
}

// validVolumeName: a name its owner gives a volume.
func validVolumeName(s string) error {
	if err := validSnapshotName(s); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "volume name %q: 1 to 64 letters, digits and, after the first, - _ .", Shorten(s))
	}
	if len(s) > 4 && s[:4] == "vol_" {
		return errdefs.New(errdefs.ErrInvalid, `a volume's name may not begin "vol_", as its ids do`)
	}
	return nil
}

// CreateVolume makes a volume of c's named name, of size bytes (0 for
// volume.DefaultSize), for client. Past the node's or c's token's
// ceilings it is refused, naming the ceiling.
func (n *Node) CreateVolume(ctx context.Context, c *Caller, client, name string, size int64) (volume.Meta, error) {
	if err := validVolumeName(name); err != nil {
		return volume.Meta{}, err
	}
	if size == 0 {
		size = volume.DefaultSize
	}
	if size < volume.MinSize || size > volume.MaxSize {
		return volume.Meta{}, errdefs.Errorf(errdefs.ErrInvalid, "a volume is %s to %s, not %s", units.FormatSize(volume.MinSize), units.FormatSize(volume.MaxSize), units.FormatSize(size))
	}
	n.vols.mu.Lock()
	defer n.vols.mu.Unlock()
	m, err := n.volManagerLocked()
	if err != nil {
		return volume.Meta{}, err
	}
	all, bytes := m.Usage(func(string) bool { return true })
	switch {
	case all >= n.opts.MaxVolumes:
		return volume.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("the node keeps %d volumes, the most it may (server.capacity.volumes); delete one first", all)}
	case bytes+size > n.opts.VolumeBytes:
		return volume.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
			Msg: fmt.Sprintf("the node's volumes are %s, and %s more is over the %s it keeps (server.capacity.volume_bytes)", units.FormatSize(bytes), units.FormatSize(size), units.FormatSize(n.opts.VolumeBytes))}
	}
	if tok := c.Token; tok != nil && tok.Volumes > 0 {
		if mine, _ := m.Usage(func(o string) bool { return o == c.Name }); mine >= tok.Volumes {
			return volume.Meta{}, &Refusal{Kind: ErrTooMany, RetryAfter: 60,
				Msg: fmt.Sprintf("token %s has %d volumes, the most it may (its volumes); delete one first", tok.Name, tok.Volumes)}
		}
	}
	meta, err := m.Create(ctx, volume.Meta{ID: n.newVolumeID(), Name: name, Owner: c.Name, Size: size, Created: time.Now().UTC()})
	if err != nil {
		if errors.Is(err, volume.ErrNameUsed) || errdefs.IsInvalid(err) || errors.Is(err, errdefs.ErrUnavailable) {
			return meta, err
		}
		n.opts.Logger.Warn("volume create failed", "err", err)
		return meta, errdefs.New(errdefs.ErrUnavailable, "the volume could not be made; see the daemon's log")
	}
	e := audit.Event{Kind: audit.KindVolumeCreated, Client: client}
	e.Detail = audit.Detail(map[string]any{"volume": meta.ID, "name": meta.Name, "bytes": meta.Size})
	n.audit.Record(e)
	return meta, nil
}

// Volumes are the volumes c may see, oldest first.
func (n *Node) Volumes(c *Caller) ([]volume.Meta, error) {
	m, err := n.volManager()
	if err != nil {
		return nil, err
	}
	return m.List(c.Sees), nil
}

// FindVolume is c's volume of that id or name.
func (n *Node) FindVolume(c *Caller, idOrName string) (volume.Meta, error) {
	m, err := n.volManager()
	if err != nil {
		return volume.Meta{}, err
	}
	return m.Find(idOrName, c.Sees)
}

// DeleteVolume deletes c's volume of that id or name and everything in
// it, for client; one attached to a session is refused.
func (n *Node) DeleteVolume(c *Caller, idOrName, client string) error {
	meta, err := n.FindVolume(c, idOrName)
	if err != nil {
		return err
	}
	err = n.vols.m.Delete(meta.ID)
	if errors.Is(err, volume.ErrInUse) && n.waitEnding(endingWait) {
		// A session that has ended (its caller may have seen it so)
		// gives its volumes back once its sandbox is gone: then.
		err = n.vols.m.Delete(meta.ID)
	}
	if err != nil {
		if errors.Is(err, volume.ErrNotFound) || errors.Is(err, volume.ErrInUse) {
			return err
		}
		n.opts.Logger.Warn("volume delete failed", "volume", meta.ID, "err", err)
		return errdefs.New(errdefs.ErrUnavailable, "the volume could not be deleted; see the daemon's log")
	}
	e := audit.Event{Kind: audit.KindVolumeDeleted, Client: client}
	e.Detail = audit.Detail(map[string]string{"volume": meta.ID, "name": meta.Name})
	n.audit.Record(e)
	return nil
}

// endingWait bounds how long a volume's delete waits for sessions that
// have ended to finish ending.
const endingWait = 10 * time.Second

// waitEnding waits, up to d, for the sessions that have ended but are
// still ending (their sandboxes being destroyed) to be done, and reports
// whether there were any.
func (n *Node) waitEnding(d time.Duration) bool {
	var ending []*Session
	n.sessions.mu.Lock()
	for _, s := range n.sessions.m {
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		select {
		case <-s.done:
		default:
			if ended {
				ending = append(ending, s)
			}
		}
	}
	n.sessions.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, s := range ending {
		select {
		case <-s.done:
		case <-timer.C:
			return true
		}
	}
	return len(ending) > 0
}

// attachVolumes resolves mounts for c (a volume c may not see does not
// exist for it) and takes each in use; release gives them back.
func (n *Node) attachVolumes(c *Caller, mounts []VolumeMount) (vs []sandbox.Volume, metas []volume.Meta, release func(), err error) {
	if len(mounts) > maxSessionVolumes {
		return nil, nil, nil, errdefs.Errorf(errdefs.ErrInvalid, "%d volumes; a session has at most %d", len(mounts), maxSessionVolumes)
	}
	m, err := n.volManager()
	if err != nil {
		return nil, nil, nil, err
	}
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	seen := map[string]bool{}
	for _, vm := range mounts {
		if err := sbspec.CheckTarget(vm.Path); err != nil {
			release()
			return nil, nil, nil, errdefs.Errorf(errdefs.ErrInvalid, "volume %q: %v", Shorten(vm.Volume), err)
		}
		if seen[vm.Path] {
			release()
			return nil, nil, nil, errdefs.Errorf(errdefs.ErrInvalid, "two volumes at %q", Shorten(vm.Path))
		}
		seen[vm.Path] = true
		meta, err := m.Find(vm.Volume, c.Sees)
		if err != nil {
			release()
			return nil, nil, nil, err
		}
		dir, rel, err := m.Use(meta.ID)
		if err != nil {
			release()
			n.opts.Logger.Warn("volume mount failed", "volume", meta.ID, "err", err)
			return nil, nil, nil, errdefs.Errorf(errdefs.ErrUnavailable, "volume %s could not be mounted; see the daemon's log", meta.ID)
		}
		releases = append(releases, rel)
		vs = append(vs, sandbox.Volume{Dir: dir, Target: vm.Path, Size: meta.Size})
		metas = append(metas, meta)
	}
	return vs, metas, release, nil
}

// createBound makes a sandbox of t for a session, with vols attached and
// starting from seed (a warm one has neither), and binds t's policy to
// it, as claimBound.
func (n *Node) createBound(ctx context.Context, t *config.Tool, scope *runScope, narrowed *attach.Policy, vols []sandbox.Volume, from fresh) (*sandbox.Sandbox, *runner.Binding, error) {
	spec := n.plan(t.Name).Spec
	if from.spec != nil {
		spec = *from.spec
	}
	spec.Volumes = append(slices.Clone(spec.Volumes), vols...)
	spec.Seed = from.seed
	start := time.Now()
	sb, err := n.rt.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrCapacity) {
			n.metrics.refusals.Inc("capacity")
			return nil, nil, AtCapacity(err)
		}
		var ue *sandbox.UnsupportedError
		if errors.As(err, &ue) {
			return nil, nil, ue // what the tool's backend refuses, by name
		}
		n.counts.Failures.Add(1)
		n.opts.Logger.Warn("create failed", "tool", t.Name, "err", err)
		return nil, nil, ErrNoSandbox
	}
	n.metrics.claims.Observe(time.Since(start).Seconds(), n.metrics.tool(t.Name), "cold")
	scope.sandbox = sb.ID()
	n.claimed(*scope, false)
	bind, err := n.bindClaimed(ctx, sb, t, scope, narrowed)
	if err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		n.opts.Logger.Warn("bind failed", "tool", t.Name, "err", err)
		return nil, nil, ErrBind
	}
	return sb, bind, nil
}
