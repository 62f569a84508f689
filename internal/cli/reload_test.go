package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testutil"
)

// TestReloadBinary reloads a real `airlock serve`: an image imported
// again under its name is what the tool's next sandbox is made from
// (the import tells the daemon); SIGHUP applies an edited config (a
// tool added, one removed, a token added); `airlock reload` of a broken
// config changes nothing and says why, and of a good one says what it
// did; every reload is in the audit log.
func TestReloadBinary(t *testing.T) {
	requireRoot(t)
	tmp, err := os.MkdirTemp("/var/tmp", "airlock-cli-reload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	store, tree := filepath.Join(tmp, "store"), filepath.Join(tmp, "tree")
	prog, err := os.ReadFile(testutil.Binary(t, "github.com/airlockhq/airlock/internal/testprog"))
	if err != nil {
		t.Fatal(err)
	}
	hello := func(text string) {
		t.Helper()
		for p, data := range map[string]string{"bin/t": string(prog), "data/hello": text} {
			os.MkdirAll(filepath.Join(tree, filepath.Dir(p)), 0o755)
			if err := os.WriteFile(filepath.Join(tree, p), []byte(data), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	hello("one\n")
	if o := execAirlock(t, nil, "", "image", "import", tree, "--name", "tiny", "--store", store); o.code != 0 {
		t.Fatalf("import: %+v", o)
	}
	secret := filepath.Join(tmp, "token")
	if err := os.WriteFile(secret, []byte("reload-token-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(tmp, "airlock.sock")
	addr := freePort(t)
	cfg := filepath.Join(tmp, "airlock.yaml")
	write := func(tools, tokens string) string {
		t.Helper()
		text := "images:\n  store: " + store + "\nserver:\n  socket: " + sock + "\n  tcp: " + addr + "\n  tokens:\n" + tokens +
			"secrets:\n  tok: {file: " + secret + "}\n  tok2: {file: " + secret + "2}\ntools:\n" + tools
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return text
	}
	if err := os.WriteFile(secret+"2", []byte("second-token-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	write("  img: {image: tiny}\n  plain: {pool: {warm: 1}}\n", "    - {name: a, secret: tok, tools: [img]}\n")
	cmd, logs := serveCmd(t, cfg, sock, filepath.Join(tmp, "audit.db"))
	defer cmd.Process.Kill()
	c := waitForDaemon(t, sock, logs, 20*time.Second)
	ctx := t.Context()
	read := func() string {
		t.Helper()
		r, err := c.Run(ctx, api.RunRequest{Tool: "img", Argv: []string{"/bin/t", "cat", "/data/hello"}})
		if err != nil {
			t.Fatalf("run: %v\n%s", err, logs)
		}
		return string(r.Stdout)
	}
	if got := read(); !strings.Contains(got, `"value":"one\n"`) {
		t.Fatalf("before: %s", got)
	}
	// The image again, other content, the same name: the import tells
	// the daemon, whose next sandbox of img is made from it.
	hello("two\n")
	o := execAirlock(t, nil, "", "image", "import", tree, "--name", "tiny", "--config", cfg)
	if o.code != 0 || !strings.Contains(o.stdout, "the daemon makes the next sandboxes of img from it") {
		t.Fatalf("import again: %+v", o)
	}
	if got := read(); !strings.Contains(got, `"value":"two\n"`) {
		t.Fatalf("after the import: %s", got)
	}
	tools := func() []string {
		t.Helper()
		ts, err := c.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, x := range ts {
			names = append(names, x.Name)
		}
		slices.Sort(names)
		return names
	}
	// SIGHUP: a tool added, one removed, a token added.
	text := write("  img: {image: tiny}\n  added: {}\n", "    - {name: a, secret: tok, tools: [img]}\n    - {name: b, secret: tok2, tools: [added]}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !slices.Equal(tools(), []string{"added", "img"}); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP the tools are %v, want added and img\n%s", tools(), logs)
		}
	}
	if _, err := client.NewTCP(addr, "second-token-0123456789abcdef").Run(ctx, api.RunRequest{Tool: "added", Argv: []string{"true"}}); err != nil {
		t.Errorf("the token the reload added: %v\n%s", err, logs)
	}
	// A broken config: nothing changes, and the caller is told why.
	if err := os.WriteFile(cfg, []byte(text+"  bad: {limits: {memory: lots}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := execAirlock(t, nil, "", "reload", "--socket", sock); o.code == 0 || !strings.Contains(o.stderr, "not reloaded") || !strings.Contains(o.stderr, "memory") {
		t.Errorf("reload of a broken config: %+v", o)
	}
	if got := tools(); !slices.Equal(got, []string{"added", "img"}) {
		t.Errorf("a failed reload changed the tools: %v", got)
	}
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := execAirlock(t, nil, "", "reload", "--socket", sock); o.code != 0 || !strings.Contains(o.stdout, "reloaded "+cfg) || !strings.Contains(o.stdout, "kept     img, added") {
		t.Errorf("reload: %+v", o)
	}
	// Not with a token: a reload is the local socket's.
	if _, err := client.NewTCP(addr, "reload-token-0123456789abcdef").Reload(ctx); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Errorf("a reload with a token: %v", err)
	}
	page, err := c.Audit(ctx, client.AuditQuery{Kind: "daemon.reloaded"})
	if err != nil || len(page.Events) != 3 {
		t.Errorf("audit: %d daemon.reloaded (%v), want 3 (import, SIGHUP, airlock reload)", len(page.Events), err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, logs)
	}
}

// freePort is a loopback address no one listens on now.
func freePort(t *testing.T) string { return testutil.FreeAddr(t) }
