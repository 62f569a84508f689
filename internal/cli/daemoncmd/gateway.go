package daemoncmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/egress/sockets"
	"github.com/airlockhq/airlock/internal/lazygw"
	"github.com/airlockhq/airlock/result"
)

// gatewayCmd is the helper airlock run starts on a sandbox's first use of
// the network (see package lazygw): the sandbox's egress gateway, on the
// listeners and namespace it is handed, until its control pipe ends.
func gatewayCmd(ctx context.Context, args []string, stdio cli.IO) error {
	if len(args) != 0 {
		return fmt.Errorf("%s takes no arguments; airlock run starts it", lazygw.Command)
	}
	ctrl := os.NewFile(lazygw.CtrlFD, "ctrl")
	events := os.NewFile(lazygw.EventsFD, "events")
	ns := os.NewFile(lazygw.NetNSFD, "netns")
	set := &sockets.Set{
		Proxy:  os.NewFile(lazygw.ProxyFD, "proxy"),
		DNSUDP: os.NewFile(lazygw.DNSUDPFD, "resolver-udp"),
		DNSTCP: os.NewFile(lazygw.DNSTCPFD, "resolver-tcp"),
	}
	for _, f := range []*os.File{ctrl, events, ns, set.Proxy, set.DNSUDP, set.DNSTCP} {
		if f == nil {
			return fmt.Errorf("%s: started without its descriptors; airlock run starts it", lazygw.Command)
		}
	}
	rd := bufio.NewReader(ctrl)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the gateway's config: %w", err)
	}
	var cfg lazygw.Config
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("the gateway's config: %w", err)
	}
	var dests []policy.Destination
	for i, a := range append(cfg.Allow, cfg.AllowPrivate...) {
		d, err := policy.Compile(policy.Spec{Host: a, Private: i >= len(cfg.Allow)})
		if err != nil {
			return fmt.Errorf("the gateway's config: %w", err)
		}
		dests = append(dests, d)
	}
	// Decisions go out one line each, as they are made: airlock run
	// streams them (--events) while the command runs.
	var mu sync.Mutex // guards werr and the writes to events
	var werr error
	emit := func(ev result.EgressEvent) {
		b, err := json.Marshal(ev)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if werr == nil {
			_, werr = events.Write(append(b, '\n'))
		}
	}
	gw, err := egress.Attach(ctx, ns, egress.Config{
		Tool:      cfg.Tool,
		SandboxID: cfg.SandboxID,
		Policy:    policy.New(dests),
		Limits:    egress.Limits{Connections: cfg.Connections, Bytes: cfg.Bytes, DNSRate: cfg.DNSRate},
		OnEvent:   emit,
		Sockets:   set,
		Logger:    slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	// The gateway serves copies of the listeners and holds the namespace
	// itself.
	set.Close()
	ns.Close()
	if err != nil {
		return err
	}
	// Until airlock run closes the control pipe (or dies: its end closes
	// with it).
	_, _ = io.Copy(io.Discard, rd)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = gw.Close(cctx)
	mu.Lock()
	err = errors.Join(err, werr, events.Close())
	mu.Unlock()
	return err
}
