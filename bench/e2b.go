package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/interp"
	"github.com/airlockhq/airlock/sandbox"
)

//go:embed e2bclient/bench.mjs
var e2bClient []byte

// e2bSDK finds the official E2B SDK: $AIRLOCK_E2B_SDK, or where
// scripts/test installs it.
func e2bSDK() string {
	for _, p := range []string{os.Getenv("AIRLOCK_E2B_SDK"), "/var/cache/airlock-test/e2b/node_modules/e2b/dist/index.mjs"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// e2bBench times the E2B SDK's create → first command against the native
// session API, from one Node process, on a warm tool of a daemon serving
// both (see e2bclient/bench.mjs).
func e2bBench(n int) error {
	fmt.Println("## E2B API\n\nThe official E2B SDK (npm `e2b` 2.51.0) against airlock's native session API, from one Node process on loopback, interleaved: `Sandbox.create` → `commands.run('true')` finished, and `POST /v1/sessions` → `POST …/exec` of the same command (`bash -l -c true`, as the SDK sends it) on the same warm tool (`pool: {warm: 2}`, let refill before each), and the same two E2B calls made with plain `fetch`, which tells the server's E2B path from the SDK's own client-side work. Teardown not timed.")
	sdk := e2bSDK()
	if sdk == "" {
		fmt.Println("\nSkipped: the E2B SDK is not installed (scripts/test installs it; or set AIRLOCK_E2B_SDK).")
		return nil
	}
	if _, err := exec.LookPath("node"); err != nil {
		fmt.Println("\nSkipped: node is not installed.")
		return nil
	}
	tcp, err := freeAddr()
	if err != nil {
		return err
	}
	e2bAddr, err := freeAddr()
	if err != nil {
		return err
	}
	const key = "bench-0123456789abcdef"
	os.Setenv("AIRLOCK_BENCH_KEY", key)
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf("server:\n  tcp: %s\n  e2b: %s\n  tokens: [{name: bench, secret: k, tools: ['*']}]\nsecrets:\n  k: {env: AIRLOCK_BENCH_KEY}\ntools:\n  warm:\n    pool: {warm: 2}\n", tcp, e2bAddr)))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-e2b")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, initPath, err := programs()
	if err != nil {
		return err
	}
	d, err := daemon.New(context.Background(), daemon.Options{Config: cfg, Socket: filepath.Join(dir, "airlock.sock"),
		Sandbox:   sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench", InitPath: initPath},
		AuditPath: filepath.Join(dir, "audit.db")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	script := filepath.Join(dir, "bench.mjs")
	if err := os.WriteFile(script, e2bClient, 0o600); err != nil {
		return err
	}
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL=http://"+e2bAddr, "E2B_SANDBOX_URL=http://"+e2bAddr,
		"E2B_API_KEY="+key, "NATIVE_URL=http://"+tcp, "N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the E2B client: %w", err)
	}
	var res struct {
		E2B, Native, Raw []float64
		CPU              struct{ E2B, Native, Raw []float64 }
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("the E2B client's answer %q: %w", out, err)
	}
	toSeries := func(name string, v []float64) *series {
		s := &series{name: name}
		for _, x := range v {
			s.d = append(s.d, time.Duration(x*1e6))
		}
		return s
	}
	e, nat, raw := toSeries("E2B SDK", res.E2B), toSeries("native session API", res.Native), toSeries("E2B protocol, plain fetch (no SDK)", res.Raw)
	fmt.Printf("\n%d each.\n\n| create → first command finished | p50 | p99 |\n| --- | --- | --- |\n", len(e.d))
	for _, s := range []*series{e, nat, raw} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("| E2B SDK over native | %s | |\n| airlock's E2B path over native (plain fetch) | %s | |\n| the SDK's own client-side cost (SDK over plain fetch) | %s | |\n",
		ms(e.pct(0.5)-nat.pct(0.5)), ms(raw.pct(0.5)-nat.pct(0.5)), ms(e.pct(0.5)-raw.pct(0.5)))
	ce, cn, cr := toSeries("", res.CPU.E2B), toSeries("", res.CPU.Native), toSeries("", res.CPU.Raw)
	fmt.Printf("\nThe client's own CPU time (user + system, from getrusage) for the same calls, p50: E2B SDK %s, native %s, plain-fetch E2B %s; the SDK spends %s more of it than plain fetch does for the same two requests.\n",
		ms(ce.pct(0.5)), ms(cn.pct(0.5)), ms(cr.pct(0.5)), ms(ce.pct(0.5)-cr.pct(0.5)))
	fmt.Println("\nFor scale: the published independent figure for E2B's own service is a 491 ms median from create to first command.")
	return nil
}

//go:embed e2bclient/interp.mjs
var interpClient []byte

// interpBench times E2B's code interpreter through the official
// @e2b/code-interpreter SDK (see e2bclient/interp.mjs): runCode in a warm
// context beside a command on the same sandbox, and create → first
// runCode with kernels started ahead in the pool.
func interpBench(n int) error {
	fmt.Println("\n## E2B code interpreter\n\nThe official `@e2b/code-interpreter` SDK (npm 2.8.0) from one Node process on loopback. Warm: one sandbox, `runCode('1+1')` in its default Python context (a real IPython kernel) against `commands.run('true')` on the same sandbox and against the same `POST /execute` made with plain `fetch`, interleaved. First call: `Sandbox.create` → first `runCode('1+1')` finished against `Sandbox.create` → first `commands.run('true')` finished, on a tool with `pool: {warm: 2, kernels: [python]}` (each pooled sandbox starts its kernel before its claim), the pool let refill before each. Teardown not timed.")
	sdk := e2bSDK()
	if sdk == "" {
		fmt.Println("\nSkipped: the E2B SDK is not installed (scripts/test installs it; or set AIRLOCK_E2B_SDK).")
		return nil
	}
	ciSDK := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(sdk))), "@e2b", "code-interpreter", "dist", "index.mjs")
	if _, err := os.Stat(ciSDK); err != nil {
		fmt.Println("\nSkipped: @e2b/code-interpreter is not installed beside the E2B SDK.")
		return nil
	}
	if err := exec.Command(interp.Python, "-c", "import ipykernel").Run(); err != nil {
		fmt.Printf("\nSkipped: %s has no ipykernel (apt-get install python3-ipykernel).\n", interp.Python)
		return nil
	}
	tcp, err := freeAddr()
	if err != nil {
		return err
	}
	e2bAddr, err := freeAddr()
	if err != nil {
		return err
	}
	const key = "bench-0123456789abcdef"
	os.Setenv("AIRLOCK_BENCH_KEY", key)
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf("server:\n  tcp: %s\n  e2b: %s\n  tokens: [{name: bench, secret: k, tools: ['*']}]\nsecrets:\n  k: {env: AIRLOCK_BENCH_KEY}\ntools:\n  ci:\n    pool: {warm: 2, kernels: [python]}\n", tcp, e2bAddr)))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-interp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, initPath, err := programs()
	if err != nil {
		return err
	}
	d, err := daemon.New(context.Background(), daemon.Options{Config: cfg, Socket: filepath.Join(dir, "airlock.sock"),
		Sandbox:   sandbox.Options{StateDir: "/run/airlock-bench", CgroupParent: "/airlock-bench", InitPath: initPath},
		AuditPath: filepath.Join(dir, "audit.db")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	script := filepath.Join(dir, "interp.mjs")
	if err := os.WriteFile(script, interpClient, 0o600); err != nil {
		return err
	}
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "E2B_CI_SDK="+ciSDK, "E2B_API_URL=http://"+e2bAddr, "E2B_SANDBOX_URL=http://"+e2bAddr,
		"E2B_API_KEY="+key, "NATIVE_URL=http://"+tcp, "N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the code interpreter client: %w", err)
	}
	var res struct {
		Warm  struct{ RunCode, Command, Raw []float64 }
		First struct{ RunCode, Command []float64 }
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("the code interpreter client's answer %q: %w", out, err)
	}
	toSeries := func(name string, v []float64) *series {
		s := &series{name: name}
		for _, x := range v {
			s.d = append(s.d, time.Duration(x*1e6))
		}
		return s
	}
	rc, cmdS, raw := toSeries("`runCode('1+1')`, SDK", res.Warm.RunCode), toSeries("`commands.run('true')`, SDK", res.Warm.Command), toSeries("`POST /execute` `1+1`, plain fetch", res.Warm.Raw)
	fmt.Printf("\nWarm context, %d each.\n\n| call | p50 | p99 |\n| --- | --- | --- |\n", len(rc.d))
	for _, s := range []*series{rc, cmdS, raw} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Printf("| runCode over a command (p50) | %s | |\n", ms(rc.pct(0.5)-cmdS.pct(0.5)))
	fr, fc := toSeries("create → first `runCode('1+1')` finished", res.First.RunCode), toSeries("create → first `commands.run('true')` finished", res.First.Command)
	fmt.Printf("\nFirst call, %d each.\n\n| path | p50 | p99 |\n| --- | --- | --- |\n", len(fr.d))
	for _, s := range []*series{fr, fc} {
		fmt.Printf("| %s | %s | %s |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)))
	}
	fmt.Println("\nTargets: runCode warm ≤ 5 ms p50; create → first runCode ≤ 50 ms p50 with a warm pool. For scale: the published independent figure for E2B's own service is a 491 ms median from create to first command.")
	return nil
}
