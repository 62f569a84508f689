package daemoncmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/result"
)

// maxDaemonStdin bounds the standard input a run through the daemon can
// carry: the API takes it whole, in the request.
const maxDaemonStdin = 512 << 10

// DaemonListening reports whether a daemon answers on socket.
func DaemonListening(socket string) bool {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runViaDaemon runs argv as a run of rf.Tool through the daemon c talks
// to, with the same output, events and result as a run here.
func runViaDaemon(ctx context.Context, c *client.Client, rf *cli.RunFlags, argv []string, stdio cli.IO) *result.Result {
	req := api.RunRequest{Tool: rf.Tool, Argv: argv, Env: rf.Env, Limits: runLimits(rf)}
	if rf.Set["workdir"] {
		req.Workdir = rf.Workdir
	}
	if rf.TTY {
		cli.SignalsCaught(ctx)
		return onTerminal(stdio, func(t client.TTY) (*result.Result, error) {
			return c.RunTTY(ctx, req, t)
		})
	}
	if f, ok := stdio.Stdin.(*os.File); stdio.Stdin != nil && (!ok || !isTerminal(f)) {
		b, err := io.ReadAll(io.LimitReader(stdio.Stdin, maxDaemonStdin+1))
		switch {
		case err != nil:
			return &result.Result{Outcome: result.Error, Error: fmt.Sprintf("read standard input: %v", err)}
		case len(b) > maxDaemonStdin:
			return &result.Result{Outcome: result.Error, Error: fmt.Sprintf("standard input over %d KiB cannot go through the daemon; give --config to run here instead", maxDaemonStdin>>10)}
		}
		req.Stdin = string(b)
	}
	cli.SignalsCaught(ctx) // an interrupt ends the request, and the daemon the run
	var r *result.Result
	var err error
	switch {
	case rf.JSON:
		r, err = c.Run(ctx, req)
	case rf.Events:
		out := &cli.SyncWriter{W: stdio.Stdout}
		r, err = c.RunStream(ctx, req, out.Event)
		if err == nil {
			out.Event(result.Event{Type: result.EventResult, Millis: r.Usage.WallMillis, Result: r})
		}
	default:
		explain := runner.Explainer(stdio.Stderr)
		r, err = c.RunStream(ctx, req, func(ev result.Event) {
			switch ev.Type {
			case result.EventStdout:
				stdio.Stdout.Write(ev.Data)
			case result.EventStderr:
				stdio.Stderr.Write(ev.Data)
			default:
				explain(ev)
			}
		})
	}
	if err != nil {
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	return r
}

// onTerminal runs a command with a terminal through the daemon: call
// makes the request (RunTTY, ExecTTY) with the user's terminal, raw while
// the command runs.
func onTerminal(stdio cli.IO, call func(client.TTY) (*result.Result, error)) *result.Result {
	term, err := cli.OpenTerminal(stdio.Stdin)
	if err != nil {
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	resize := make(chan api.TTYSize, 1)
	if err := term.Raw(func(rows, cols uint16) { cli.SendLatest(resize, api.TTYSize{Rows: rows, Cols: cols}) }); err != nil {
		fmt.Fprintf(stdio.Stderr, "airlock: the terminal: %v\n", err)
	}
	defer term.Restore()
	r, err := call(client.TTY{Size: api.TTYSize{Rows: term.Rows, Cols: term.Cols}, Stdin: stdio.Stdin, Output: stdio.Stdout,
		Resize: resize, OnEvent: runner.Explainer(cli.CRLF{W: stdio.Stderr})})
	term.Restore()
	if err != nil {
		return &result.Result{Outcome: result.Error, Error: err.Error()}
	}
	return r
}

// runLimits are the ceilings the flags lower (lowerFlags), for the
// daemon to apply under the tool's; nil when none is given.
func runLimits(rf *cli.RunFlags) *api.RunLimits {
	var l api.RunLimits
	set := false
	for _, n := range lowerFlags {
		if !rf.Set[n] {
			continue
		}
		set = true
		switch n {
		case "memory":
			l.Memory = strconv.FormatInt(rf.Limits.Memory, 10)
		case "pids":
			l.Pids = rf.Limits.Pids
		case "output":
			l.Output = strconv.FormatInt(rf.Limits.Output, 10)
		case "time":
			l.Time = rf.Limits.Time.String()
		case "cpu-time":
			l.CPUTime = rf.Limits.CPUTime.String()
		}
	}
	if !set {
		return nil
	}
	return &l
}
