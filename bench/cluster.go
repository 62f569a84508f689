package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/kube/kubetest"
)

// kubeAPIServer finds the kube-apiserver scripts/kube-apiserver builds.
func kubeAPIServer() string {
	for _, p := range []string{os.Getenv("AIRLOCK_TEST_KUBE_APISERVER"), "/var/cache/airlock-test/kube/kube-apiserver-v1.37.2"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// clusterBench times a run through a cluster's front against the same
// run sent to a node directly (the front's added latency), and runs/s
// through the front over one node and over three, on a real control
// plane (etcd and kube-apiserver on loopback) with `airlock serve` nodes
// and an `airlock front`, all processes of this machine.
func clusterBench(n int, tput time.Duration) error {
	fmt.Println("## A cluster's front\n\nA real control plane on loopback (etcd, kube-apiserver), `airlock serve` nodes registered through it and one `airlock front`, all on this machine. Latency: `POST /v1/runs` of `true` on a warm tool (`pool: {warm: 2}`), sent to a node's TCP API directly and through the front, interleaved, one at a time. Throughput: runs/s through the front with 8 callers, over one node, then over three; the nodes share the machine's cores, so three nodes are not three machines' worth.")
	apiserver := kubeAPIServer()
	if apiserver == "" {
		fmt.Println("\nSkipped: kube-apiserver is not built (scripts/test builds it; or set AIRLOCK_TEST_KUBE_APISERVER).")
		return nil
	}
	bin, _, err := programs()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-cluster")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cp, stopCP, err := kubetest.Run(apiserver, dir)
	if err != nil {
		return err
	}
	defer stopCP()
	token, ca := filepath.Join(dir, "admin.token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, []byte(cp.Tokens["admin"]), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(ca, cp.CA, 0o600); err != nil {
		return err
	}
	const key = "bench-cluster-0123456789abcdef"
	kubeYAML := fmt.Sprintf("  kubernetes: {server: %q, token_file: %s, ca_file: %s, namespace: %s}\n", cp.URL, token, ca, kubetest.Namespace)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait()
		}
	}()
	startProc := func(name string, args []string, cfg string) error {
		cfgPath := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return err
		}
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, append(args, "--config", cfgPath)...)
		cmd.Env = append(os.Environ(), "BENCH_KEY="+key)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		return nil
	}
	auth := "server:\n  tcp: %s\n  tokens: [{name: bench, secret: k, tools: ['*']}]\nsecrets:\n  k: {env: BENCH_KEY}\ntools:\n  warm: {pool: {warm: 2}}\ncluster:\n"
	nodeAddrs := map[string]string{}
	startNode := func(name string) error {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		nodeAddrs[name] = addr
		return startProc(name, []string{"serve", "--socket", filepath.Join(dir, name+".sock"), "--audit", filepath.Join(dir, name+".db"),
			"--state-dir", "/run/airlock-bench-" + name, "--cgroup-parent", "/airlock-bench-" + name},
			fmt.Sprintf(auth, addr)+"  node: "+name+"\n"+kubeYAML)
	}
	kc, err := cluster.KubeClient(config.Kubernetes{Server: cp.URL, TokenFile: token, CAFile: ca, Namespace: kubetest.Namespace})
	if err != nil {
		return err
	}
	// ready waits until the named nodes' leases say their pools are full.
	ready := func(names ...string) error {
		deadline := time.Now().Add(90 * time.Second)
		for {
			leases, _, err := kc.ListLeases(context.Background(), cluster.Selector)
			full := 0
			for _, l := range leases {
				for _, n := range names {
					if l.Spec.HolderIdentity == n && !l.Expired(time.Now()) && strings.Contains(l.Metadata.Annotations[cluster.AnnotationStats], `"warm":{"warm":2,"idle":2}`) {
						full++
					}
				}
			}
			if err == nil && full == len(names) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nodes %v not ready in 90 s: %v", names, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := startNode("node-a"); err != nil {
		return err
	}
	frontAddr, err := freeAddr()
	if err != nil {
		return err
	}
	if err := startProc("front", []string{"front"}, fmt.Sprintf(auth, frontAddr)+kubeYAML); err != nil {
		return err
	}
	if err := ready("node-a"); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	runOnce := func(addr string) error {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/runs", strings.NewReader(`{"tool":"warm","argv":["true"]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"exit_code":0`) {
			return fmt.Errorf("run via %s: %d %s", addr, resp.StatusCode, b)
		}
		return nil
	}
	// The front answers once its watch has the node.
	for deadline := time.Now().Add(30 * time.Second); runOnce(frontAddr) != nil; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the front did not place a run in 30 s: %v", runOnce(frontAddr))
		}
		time.Sleep(100 * time.Millisecond)
	}
	direct, via := &series{name: "to the node directly"}, &series{name: "through the front"}
	for i := range n + n/10 {
		order := []*series{direct, via}
		if i%2 == 1 {
			order = []*series{via, direct}
		}
		for _, s := range order {
			addr := nodeAddrs["node-a"]
			if s == via {
				addr = frontAddr
			}
			t0 := time.Now()
			if err := runOnce(addr); err != nil {
				return err
			}
			if i >= n/10 { // the first tenth warms up
				s.d = append(s.d, time.Since(t0))
			}
		}
	}
	fmt.Printf("\n%d each, one node.\n\n| `POST /v1/runs` (`true`, warm) | p50 | p99 |\n| --- | --- | --- |\n", len(direct.d))
	for _, s := range []*series{direct, via} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("| the front's added latency | %s | |\n", ms(via.pct(0.5)-direct.pct(0.5)))

	rate := func(addr string) (float64, int64, error) {
		var ok, failed atomic.Int64
		var first atomic.Value
		stop := time.Now().Add(tput)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if err := runOnce(addr); err != nil {
						failed.Add(1)
						first.CompareAndSwap(nil, err.Error())
					} else {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if f := failed.Load(); f > 0 {
			return 0, f, fmt.Errorf("%d runs failed; the first: %v", f, first.Load())
		}
		return float64(ok.Load()) / time.Since(t0).Seconds(), 0, nil
	}
	one, _, err := rate(frontAddr)
	if err != nil {
		return err
	}
	for _, name := range []string{"node-b", "node-c"} {
		if err := startNode(name); err != nil {
			return err
		}
	}
	if err := ready("node-a", "node-b", "node-c"); err != nil {
		return err
	}
	time.Sleep(time.Second) // the front's watch
	three, _, err := rate(frontAddr)
	if err != nil {
		return err
	}
	fmt.Printf("\nThroughput through the front, 8 callers, %v each:\n\n| nodes | runs/s |\n| --- | --- |\n| 1 | %.0f |\n| 3 (same 2 cores) | %.0f |\n| 3 over 1 | %.2fx |\n", tput, one, three, three/one)
	return nil
}
