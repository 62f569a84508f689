package daemon

import (
	"context"
	"net"
	"net/url"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/tokens"
)

// Reload reads the daemon's config file again and applies it (SIGHUP,
// airlock reload, POST /v1/reload): its tokens, from the next request
// on, and its tools (node.Reload: images resolved again, pools of
// changed tools replaced, unchanged ones kept, runs and sessions in
// flight untouched). A config that does not load, whose tokens cannot
// be read, or that the node refuses, changes nothing and says why.
// client is who asked.
func (d *Daemon) Reload(ctx context.Context, client string) (api.ReloadReport, error) {
	return d.reload(ctx, client, false)
}

// reload is Reload, or with imagesOnly node.ReloadImages: the config
// kept, its image names resolved again.
func (d *Daemon) reload(ctx context.Context, client string, imagesOnly bool) (api.ReloadReport, error) {
	if imagesOnly {
		return d.Node.ReloadImages(ctx, client)
	}
	path := d.startPath
	var cfg *config.Config
	var err error
	if path == "" {
		// Started without a file: the embedded defaults, again.
		cfg = config.Empty()
	} else if cfg, err = config.Load(path); err != nil {
		return api.ReloadReport{Config: path}, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
	}
	toks, err := tokens.Load(cfg)
	if err != nil {
		return api.ReloadReport{Config: path}, errdefs.Errorf(errdefs.ErrInvalid, "the config was not reloaded: %v", err)
	}
	// The tokens change with the tools, not after the reload's audit
	// record: a token added with its tool is valid as soon as the tool is
	// listed.
	return d.Node.ReloadWith(ctx, cfg, client, func() { d.SetTokens(toks) })
}

// consoleLogin is a one-time link that logs a browser on this host into
// the web console with the local socket's rights.
func (d *Daemon) consoleLogin() (string, error) {
	if d.console == nil || d.tcp == nil {
		return "", errdefs.New(errdefs.ErrConflict, "the web console is served on server.tcp, which this daemon's config does not set")
	}
	addr, ok := d.tcp.Addr().(*net.TCPAddr)
	if !ok {
		return "", errdefs.New(errdefs.ErrUnavailable, "the TCP listener has no TCP address")
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)) + "/console/login?code=" + url.QueryEscape(d.console.Code()), nil
}
