package imagetest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Registry runs Debian's docker-registry (the CNCF distribution
// registry) on loopback, behind a proxy that demands basic auth and
// counts the blob bytes it serves. scripts/test installs it; CI must have
// it.
func Registry(t *testing.T, user, password string) (host string, blobBytes *atomic.Int64) {
	t.Helper()
	return RegistryAt(t, "127.0.0.1:0", user, password)
}

// RegistryAt is Registry with its proxy listening on addr: 127.0.0.2:0
// is loopback that registry clients do not take for a local registry,
// so they speak HTTPS to it unless told to allow plain HTTP.
func RegistryAt(t *testing.T, addr, user, password string) (host string, blobBytes *atomic.Int64) {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("docker-registry is not installed; scripts/test installs it")
		}
		t.Skip("needs Debian's docker-registry (scripts/test installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s}\n", filepath.Join(dir, "data"), backend)), 0o600)
	cmd := exec.Command(bin, "serve", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		if resp, err := http.Get("http://" + backend + "/v2/"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry never answered:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	target, _ := url.Parse("http://" + backend)
	rp := httputil.NewSingleHostReverseProxy(target)
	blobBytes = &atomic.Int64{}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	front, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet {
			cw := &countingWriter{ResponseWriter: w, n: blobBytes}
			rp.ServeHTTP(cw, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	proxy.Listener.Close()
	proxy.Listener = front
	proxy.Start()
	t.Cleanup(proxy.Close)
	return strings.TrimPrefix(proxy.URL, "http://"), blobBytes
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.ResponseWriter.Write(b)
}
