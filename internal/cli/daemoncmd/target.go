package daemoncmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cli"
)

// The environment of a daemon-client command: the remote daemon or front
// its requests go to, and the token they carry.
const (
	envHost      = "AIRLOCK_HOST"
	envToken     = "AIRLOCK_TOKEN"
	envTokenFile = "AIRLOCK_TOKEN_FILE"
)

// maxTokenFile bounds what a token file may hold.
const maxTokenFile = 4 << 10

// target is where a daemon-client command sends its requests: the local
// daemon's socket, or with --host (or $AIRLOCK_HOST) a daemon's TCP
// listener or a cluster's front. A remote one needs a token, from
// --token-file, $AIRLOCK_TOKEN_FILE or $AIRLOCK_TOKEN: never from the
// command line, which other users of the host can read.
type target struct {
	socket    string
	host      string
	tokenFile string
	// given reports whether a flag was given on the command line.
	given func(name string) bool
}

// targetFlags adds --socket, --host and --token-file to fs.
func targetFlags(fs *flag.FlagSet) *target {
	t := &target{given: func(name string) bool {
		var given bool
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
		return given
	}}
	fs.StringVar(&t.socket, "socket", api.DefaultSocket, "the local daemon's socket")
	fs.StringVar(&t.host, "host", os.Getenv(envHost), "a remote daemon's TCP address or a cluster's front: http://HOST:PORT or https://HOST[:PORT] (default $"+envHost+"); the token comes from --token-file or $"+envToken)
	fs.StringVar(&t.tokenFile, "token-file", os.Getenv(envTokenFile), "a file holding the token for --host (default $"+envTokenFile+", else the token is $"+envToken+")")
	return t
}

// remote reports whether the requests go to --host.
func (t *target) remote() bool { return t.host != "" }

// client returns a client of the target. Conflicting or missing settings
// are a usage error of cmd, printed on stderr; a token that goes
// unencrypted off this host is warned of there.
func (t *target) client(cmd string, stderr io.Writer) (*client.Client, error) {
	if !t.remote() {
		if t.given("token-file") {
			return nil, cli.UsageError(stderr, cmd, "--token-file is for --host: the local socket needs no token")
		}
		return client.New(t.socket), nil
	}
	if t.given("socket") {
		return nil, cli.UsageError(stderr, cmd, "--socket and --host (or $%s) name two daemons; give one", envHost)
	}
	u, err := client.ParseTarget(t.host)
	if err != nil {
		return nil, cli.UsageError(stderr, cmd, "--host: %v", err)
	}
	token, err := t.token()
	if err != nil {
		return nil, cli.UsageError(stderr, cmd, "%v", err)
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		fmt.Fprintf(stderr, "%s: warning: the token goes to %s unencrypted; put a TLS-terminating proxy in front of it and use https://\n", cmd, u.Host)
	}
	return client.NewRemote(t.host, token)
}

// token reads the token for --host.
func (t *target) token() (string, error) {
	if t.tokenFile == "" {
		tok := strings.TrimSpace(os.Getenv(envToken))
		if tok == "" {
			return "", fmt.Errorf("--host %s needs a token: --token-file FILE, $%s or $%s", t.host, envTokenFile, envToken)
		}
		return tok, nil
	}
	f, err := os.Open(t.tokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("token file: %w", err)
	case len(b) > maxTokenFile:
		return "", fmt.Errorf("token file %s: over %d KiB, not a token", t.tokenFile, maxTokenFile>>10)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("token file %s is empty", t.tokenFile)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", errors.New("token file " + t.tokenFile + ": a token is one line without spaces")
	}
	return tok, nil
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
