package daemoncmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/front"
	"github.com/airlockhq/airlock/internal/tokens"
)

// frontCmd is `airlock front`: a cluster's front (docs/cluster.md), on
// the config's server.tcp, until interrupted.
func frontCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs := flag.NewFlagSet("airlock front", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	cfgPath := fs.String("config", "", "config file (default: $AIRLOCK_CONFIG, /etc/airlock/airlock.yaml)")
	grace := fs.Duration("grace", 30*time.Second, "how long calls in flight may finish on shutdown")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock front [flags]\n\nServes a cluster's API on the config's server.tcp: checks each call's token,\nplaces new runs and sessions on the nodes registered in the Kubernetes API\n(warm capacity first) and sends calls on a session to its node. Stateless:\nrun as many as you like. See docs/cluster.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	cfg, err := config.Discover(*cfgPath)
	if err != nil {
		return err
	}
	if !cfg.Server.TCP.IsValid() {
		return errors.New("airlock front: the config sets no server.tcp, the address the front serves on")
	}
	toks, err := tokens.Load(cfg)
	if err != nil {
		return err
	}
	kc, err := cluster.KubeClient(cfg.Cluster.Kubernetes)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stdio.Stderr, nil))
	view := cluster.NewView(kc, logger)
	vctx, stopView := context.WithCancel(context.WithoutCancel(ctx))
	defer stopView()
	go view.Run(vctx)
	ln, err := net.Listen("tcp", cfg.Server.TCP.String())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Server.TCP, err)
	}
	fr := front.New(view, toks, logger)
	// As a daemon's TCP listener: connections and headers bounded, idle
	// and slow ones closed (the front faces the network).
	ln = front.Listener(ln)
	srv := fr.Server(fr.Handler())
	servers := []*http.Server{srv}
	errc := make(chan error, 2)
	if addr := cfg.Server.E2B; addr.IsValid() {
		eln, err := net.Listen("tcp", addr.String())
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s (server.e2b): %w", addr, err)
		}
		eln = front.Listener(eln)
		esrv := fr.Server(fr.E2BHandler())
		servers = append(servers, esrv)
		go func() { errc <- esrv.Serve(eln) }()
		logger.Info("front: listening", "e2b", eln.Addr().String())
	}
	// SIGHUP (systemctl reload, kill -HUP) reads the file's tokens
	// again; the rest (listeners, the cluster) is read at start.
	var reloadMu sync.Mutex
	cli.OnHangup(ctx, func() {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		next, err := config.Discover(*cfgPath)
		var toks *tokens.Set
		if err == nil {
			toks, err = tokens.Load(next)
		}
		if err != nil {
			logger.Error("front: not reloaded; nothing changed", "err", err)
			return
		}
		fr.SetTokens(toks)
		logger.Info("front: reloaded", "config", next.Path, "tokens", len(next.Server.Tokens))
	})
	cli.SignalsCaught(ctx)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("front: listening", "tcp", ln.Addr().String(), "tokens", len(cfg.Server.Tokens), "namespace", kc.Namespace())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("front: shutting down", "grace", *grace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			errs = append(errs, err, s.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("front: stopped")
	return nil
}
