package daemoncmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/mcpserver"
)

// mcpCmd is `airlock mcp`: an MCP server on standard input and output,
// for agents that launch a command. With a daemon answering on its
// socket it relays to the daemon's /mcp (warm pools, one audit log);
// otherwise it runs the daemon's parts embedded.
func mcpCmd(ctx context.Context, args []string, stdio cli.IO) error {
	fs := flag.NewFlagSet("airlock mcp", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	var opts daemon.Options
	cfgPath := embedFlags(fs, &opts, ", when no daemon runs")
	tgt := targetFlags(fs)
	embedded := fs.Bool("embedded", false, "run the tools in this process even when a daemon answers on --socket")
	fs.Usage = func() {
		fmt.Fprintln(stdio.Stderr, "Usage: airlock mcp [flags]\n\nServes MCP over standard input and output: each configured tool with a\ncommand is an MCP tool whose calls run in fresh sandboxes. Uses the daemon\nwhen its socket answers, and runs embedded otherwise.\n\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := cli.ParseNoArgs(fs, args, stdio); done {
		return err
	}
	transport := &mcp.IOTransport{Reader: readCloser{stdio.Stdin}, Writer: writeCloser{stdio.Stdout}}
	opts.Socket = tgt.socket
	if tgt.remote() && *embedded {
		return cli.UsageError(stdio.Stderr, "airlock mcp", "--embedded runs the tools here; it cannot go with --host (or $%s)", envHost)
	}
	if tgt.remote() || !*embedded && DaemonListening(opts.Socket) {
		c, err := tgt.client("airlock mcp", stdio.Stderr)
		if err != nil {
			return err
		}
		// The daemon's config, audit log and store serve the calls: a
		// flag meant for an embedded run is not dropped without a word.
		var ignored []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "socket" && f.Name != "host" && f.Name != "token-file" {
				ignored = append(ignored, "--"+f.Name)
			}
		})
		if len(ignored) > 0 {
			where, instead := "on "+opts.Socket, "; --embedded runs the tools here instead"
			if tgt.remote() {
				where, instead = "at "+tgt.host, ""
			}
			fmt.Fprintf(stdio.Stderr, "airlock mcp: the daemon %s serves these calls with its config, audit log and image store, so %s %s ignored%s\n",
				where, strings.Join(ignored, ", "), plural(len(ignored), "is", "are"), instead)
		}
		return relayMCP(ctx, c, transport)
	}
	if tgt.given("token-file") {
		return cli.UsageError(stdio.Stderr, "airlock mcp", "--token-file is for --host")
	}
	var err error
	if opts.Config, err = config.Discover(*cfgPath); err != nil {
		return err
	}
	// Standard output is the protocol's: the log goes to standard error.
	opts.Logger = slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts.Embedded, opts.Version = true, cli.Version()
	cli.SignalsCaught(ctx)
	d, err := daemon.New(ctx, opts)
	if err != nil {
		return err
	}
	dctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- d.Serve(dctx) }()
	client := fmt.Sprintf("stdio:uid=%d,ppid=%d", os.Getuid(), os.Getppid())
	err = ignoreEOF(d.LocalMCPServer(client).Run(ctx, transport))
	stop()
	return errors.Join(err, <-served)
}

// relayMCP serves stdio by relaying every tool of the daemon's /mcp.
func relayMCP(ctx context.Context, c *client.Client, transport mcp.Transport) error {
	hc, endpoint := c.Endpoint("/mcp")
	relay := mcpserver.NewRelay()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-mcp", Version: cli.Version()}, relay.ClientOptions()).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect to the daemon's MCP endpoint: %w", err)
	}
	defer up.Close()
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Version: cli.Version()}, nil)
	if err := relay.Mirror(ctx, s, mcpserver.Upstream{Session: up}); err != nil {
		return err
	}
	return ignoreEOF(s.Run(ctx, transport))
}

// ignoreEOF treats the client closing standard input as the normal end.
func ignoreEOF(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || isClosed(err) {
		return nil
	}
	return err
}

// isClosed reports the end of standard input or of the connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, mcp.ErrConnectionClosed)
}

// readCloser and writeCloser let the transport close what it was given
// without closing the process's own standard streams.
type readCloser struct{ r io.Reader }

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct{ w io.Writer }

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }

// plural picks one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
