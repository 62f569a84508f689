package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestServeBinary runs the real `airlock serve`, makes a run through its
// socket, and stops it with SIGTERM as an init system would.
func TestServeBinary(t *testing.T) {
	requireRoot(t)
	cfg := writeConfig(t, "tools:\n  sh:\n    pool: {warm: 1}\n")
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd := exec.Command(airlockBin(t), "serve", "--config", cfg, "--socket", sock,
		"--state-dir", "/run/airlock-test-cli", "--cgroup-parent", "/airlock-test-cli")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := client.New(sock)
	deadline := time.Now().Add(20 * time.Second)
	for c.Health(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("daemon never answered:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"echo", "through the daemon"}})
	if err != nil || string(r.Stdout) != "through the daemon\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}
