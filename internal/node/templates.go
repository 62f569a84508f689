package node

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/imagebuild"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/internal/runner/attach"
	"github.com/airlockhq/airlock/internal/sbspec"
	"github.com/airlockhq/airlock/internal/templates"
	"github.com/airlockhq/airlock/sandbox"
)

// E2B template builds on the node (the config's builds section; package
// templates; docs/decisions/0034): the manager is opened on first use,
// in the image store's directory, and its builds' steps are sandboxes of
// the node's runtime, their egress recorded in its audit log.

type builds struct {
	mu sync.Mutex // guards m and store
	m  *templates.Manager
	// store is the image store the templates' images are in.
	store *image.Store
}

// Templates is the node's template manager, opened on first use.
func (n *Node) Templates() (*templates.Manager, error) {
	n.tpl.mu.Lock()
	defer n.tpl.mu.Unlock()
	if n.tpl.m != nil {
		return n.tpl.m, nil
	}
	so := attach.StoreOptions(n.opts.Config.Images)
	if n.opts.ImageStore != "" {
		so.Dir = n.opts.ImageStore
	}
	st, err := image.Open(so)
	if err != nil {
		return nil, err
	}
	m, err := templates.Open(templates.Options{Dir: filepath.Join(st.Dir(), "templates"), Store: st, Runtime: n.rt, Logger: n.opts.Logger})
	if err != nil {
		return nil, err
	}
	n.tpl.m, n.tpl.store = m, st
	return m, nil
}

// closeTemplates cancels the builds running and waits for their
// sandboxes to go.
func (n *Node) closeTemplates() {
	n.tpl.mu.Lock()
	m := n.tpl.m
	n.tpl.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// BuildSettings are the builds of c's as the config says them, or the
// refusal of a caller that may not build: the config has no builds
// section, the token has no builds: true, or it may not use the tool
// built templates run as.
func (n *Node) BuildSettings(c *Caller, client string) (templates.Settings, error) {
	cfg := n.Tools()
	b := cfg.Builds
	switch {
	case b == nil:
		return templates.Settings{}, errdefs.New(errdefs.ErrDenied, "this daemon builds no templates: its config has no builds section (docs/images.md)")
	case c.Token != nil && !c.Token.Builds:
		return templates.Settings{}, errdefs.Errorf(errdefs.ErrDenied, "%s may not build templates (its token has no builds: true)", c.Name)
	case !c.Allows(b.Tool):
		return templates.Settings{}, errdefs.Errorf(errdefs.ErrDenied, "%s may not use tool %s, which built templates run as (builds.tool)", c.Name, b.Tool)
	}
	lim := sandbox.Limits(b.Limits.Apply(sbspec.Limits(imagebuild.DefaultLimits())))
	s := templates.Settings{Limits: lim, Concurrency: b.Concurrency, UploadMax: b.UploadMax, CacheMax: b.CacheMax}
	pol := attach.Policy{Tool: b.Tool, Egress: b.Allow}
	s.Bind = func(owner, build string) func(context.Context, *sandbox.Sandbox) (*runner.Binding, error) {
		return func(ctx context.Context, sb *sandbox.Sandbox) (*runner.Binding, error) {
			scope := &runScope{tool: b.Tool, sandbox: sb.ID(), run: "build:" + build, client: client}
			p := pol
			p.OnEgress, p.OnBroker = n.netRecorder(scope)
			return attach.Bind(ctx, sb, p)
		}
	}
	return s, nil
}

// BuildTool is the tool built templates run as, if builds are on.
func (n *Node) BuildTool() *config.Tool {
	cfg := n.Tools()
	if cfg.Builds == nil {
		return nil
	}
	return cfg.Tools[cfg.Builds.Tool]
}

// OpenFromImage opens a session of tool t whose sandbox is made from img
// (a built template's) in place of the tool's image: t's limits, policy
// and environment, img's files and defaults under them. It is never a
// pool's.
func (n *Node) OpenFromImage(ctx context.Context, t *config.Tool, img *image.Image, tmpl, client string, c *Caller, idle, life time.Duration, narrowed *attach.Policy, mounts []VolumeMount) (*Session, error) {
	p, err := attach.For(n.Tools(), t, attach.Overrides{Image: img})
	if err != nil {
		return nil, err
	}
	p.Spec.Label = ""
	tc := *t
	tc.Env, tc.Workdir = p.Env, p.Workdir
	s, err := n.openSession(ctx, &tc, client, c, idle, life, narrowed, mounts, fresh{spec: &p.Spec})
	if err != nil {
		return nil, err
	}
	n.opts.Logger.Debug("session from a built template", "session", s.ID(), "template", tmpl, "image", img.Digest)
	return s, nil
}
