package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/sandbox"
)

//go:embed e2bclient/sdk.mjs
var sdkJS []byte

//go:embed e2bclient/sdk.py
var sdkPy []byte

// sdkPython is the Python with the E2B SDK: $AIRLOCK_TEST_PY, or where
// scripts/test makes its virtualenv.
func sdkPython() string {
	for _, p := range []string{os.Getenv("AIRLOCK_TEST_PY"), "/var/cache/airlock-test/py/bin/python"} {
		if p != "" && exec.Command(p, "-c", "import e2b").Run() == nil {
			return p
		}
	}
	return ""
}

// The published figures this section is compared with: ComputeSDK's
// public benchmarks (create → first command finished, their own client
// against each provider's service), p50 and p95, one at a time and 100
// at once.
var published = []struct {
	name               string
	p50, p95, b50, b95 int
}{
	{"E2B's service", 491, 685, 822, 965},
	{"Daytona's service", 186, 492, 367, 611},
}

// The tool the section creates sandboxes of. Its ceilings are an
// operator's choice for a tool that runs `python3 -V`, small enough that
// 100 held at once, with the pool, fit the node's default budget (80 % of
// the memory and half of pid_max, summed over ceilings; 512 MiB and 256
// pids, the defaults, would admit about 37 on a 24 GiB host).
const (
	sdkTool   = "sdk"
	sdkLimits = "{memory: 128MiB, pids: 64}"
	sdkBurst  = 100
)

// sdkWorker is a long-lived client process (e2bclient/sdk.mjs or sdk.py)
// answering one JSON line per request line.
type sdkWorker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startWorker(argv []string, env []string) (*sdkWorker, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	return &sdkWorker{cmd: cmd, in: in, out: sc}, nil
}

// line reads the worker's next answer.
func (w *sdkWorker) line() ([]byte, error) {
	if !w.out.Scan() {
		if err := w.out.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s ended", filepath.Base(w.cmd.Path))
	}
	return w.out.Bytes(), nil
}

func (w *sdkWorker) ask(req string, v any) error {
	if _, err := fmt.Fprintln(w.in, req); err != nil {
		return err
	}
	b, err := w.line()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: answer %q: %w", req, b, err)
	}
	return nil
}

func (w *sdkWorker) close() {
	w.in.Close()
	w.cmd.Wait()
}

// sdkOne is the answer to "one …"; sdkBurstResult to "burst …".
type sdkOne struct {
	MS    float64
	Error string
}

type sdkBurstResult struct {
	MS     []float64
	Errors []struct {
		Error string
		MS    float64
	}
	Wall, Kill float64
	Error      string
}

// sdkPath is one way to create → first command: a worker and the path it
// is asked for.
type sdkPath struct {
	name string
	w    *sdkWorker
	path string
	one  series
	b    sdkBurstResult
	pool sdkPoolRecord
}

// sdkPoolRecord is what the pool did during one burst.
type sdkPoolRecord struct {
	before, after api.PoolStats
	// emptied is when the pool first had no ready sandbox, from the
	// burst's start; refilled when it was back at its target, from the
	// burst's last command finished; minIdle the fewest ready seen.
	emptied, refilled time.Duration
	sawEmpty          bool
	minIdle           int
	atCapacity        bool
	shed              int64
}

// sdkBench times ComputeSDK's method (create → first command finished,
// one at a time and 100 at once) through the official E2B SDKs, JS and
// Python, against airlock's native session API, on one daemon serving
// both, and reports what the warm pool did in each burst.
func sdkBench(n, warm int) error {
	n, warm = max(n, 1), max(warm, 0)
	fmt.Printf("\n## ComputeSDK's method: create → first command, one at a time and %d at once\n\n", sdkBurst)
	fmt.Printf("Create → first command (`python3 -V`) finished, through the official E2B SDKs against airlock's E2B API and through airlock's native session API (`POST /v1/sessions` → `POST …/exec` with `fetch` from Node), one daemon in the benchmark's process serving both on loopback, the tool `%s` with `pool: {warm: %d}` and `limits: %s`. One at a time: %d each, the paths interleaved, the pool let refill before each (so every create is a warm claim). %d at once: one client process each, JS `Promise.all` and Python `AsyncSandbox` with `asyncio.gather` of %d create + run, each timed on its own; the pool full before each burst. Teardown not timed.\n",
		sdkTool, warm, sdkLimits, n, sdkBurst, sdkBurst)
	sdk := e2bSDK()
	py := sdkPython()
	if sdk == "" || py == "" {
		fmt.Println("\nSkipped: the E2B SDKs are not installed (scripts/test installs them; or set AIRLOCK_E2B_SDK and AIRLOCK_TEST_PY).")
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
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf("server:\n  tcp: %s\n  e2b: %s\n  tokens: [{name: bench, secret: k, tools: ['*']}]\nsecrets:\n  k: {env: AIRLOCK_BENCH_KEY}\ntools:\n  %s:\n    pool: {warm: %d}\n    limits: %s\n", tcp, e2bAddr, sdkTool, warm, sdkLimits)))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-sdk")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, initPath, err := programs()
	if err != nil {
		return err
	}
	sock := filepath.Join(dir, "airlock.sock")
	d, err := daemon.New(context.Background(), daemon.Options{Config: cfg, Socket: sock,
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
	c := client.New(sock)

	jsPath, pyPath := filepath.Join(dir, "sdk.mjs"), filepath.Join(dir, "sdk.py")
	if err := os.WriteFile(jsPath, sdkJS, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pyPath, sdkPy, 0o600); err != nil {
		return err
	}
	env := []string{"E2B_SDK=" + sdk, "E2B_API_URL=http://" + e2bAddr, "E2B_SANDBOX_URL=http://" + e2bAddr,
		"E2B_API_KEY=" + key, "NATIVE_URL=http://" + tcp, "TOOL=" + sdkTool, "PYTHONDONTWRITEBYTECODE=1"}
	js, err := startWorker([]string{"node", jsPath}, env)
	if err != nil {
		return err
	}
	defer js.close()
	pw, err := startWorker([]string{py, pyPath}, env)
	if err != nil {
		return err
	}
	defer pw.close()
	var hello struct{ Version string }
	if b, err := pw.line(); err != nil || json.Unmarshal(b, &hello) != nil {
		return fmt.Errorf("the Python SDK worker did not start: %v", err)
	}
	var pkg struct{ Version string }
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(sdk)), "package.json")); err == nil {
		json.Unmarshal(b, &pkg)
	}
	paths := []*sdkPath{
		{name: fmt.Sprintf("E2B JS SDK (npm `e2b` %s), airlock", pkg.Version), w: js, path: "e2b"},
		{name: fmt.Sprintf("E2B Python SDK (`e2b` %s, `AsyncSandbox`), airlock", hello.Version), w: pw, path: "e2b"},
		{name: "airlock's native session API (`fetch`, Node)", w: js, path: "native"},
	}

	pools := func() api.PoolStats {
		ps, err := c.Pools(context.Background())
		if err != nil || len(ps) == 0 {
			return api.PoolStats{}
		}
		return ps[0]
	}
	refilled := func() {
		for pools().Idle < warm {
			time.Sleep(2 * time.Millisecond)
		}
	}
	one := func(p *sdkPath) (float64, error) {
		refilled()
		var r sdkOne
		if err := p.w.ask("one "+p.path, &r); err != nil {
			return 0, err
		}
		if r.Error != "" {
			return 0, fmt.Errorf("%s: %s", p.name, r.Error)
		}
		return r.MS, nil
	}
	// Warm-up, untimed: each client's first calls pay its imports and
	// connections.
	for range 3 {
		for _, p := range paths {
			if _, err := one(p); err != nil {
				return err
			}
		}
	}
	for i := range n {
		for j := range paths {
			p := paths[(i+j)%len(paths)]
			ms, err := one(p)
			if err != nil {
				return err
			}
			p.one.d = append(p.one.d, time.Duration(ms*1e6))
		}
	}
	for _, p := range paths {
		refilled()
		if err := sdkBurstRun(c, p, warm); err != nil {
			return err
		}
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nLoad average at the end (1, 5, 15 min): %s.\n", strings.Join(strings.Fields(string(load))[:3], ", "))
	fmt.Printf("\n| create → first command finished | one at a time p50 | p95 | %d at once p50 | p95 | failed |\n| --- | --- | --- | --- | --- | --- |\n", sdkBurst)
	for _, p := range paths {
		b := series{}
		for _, x := range p.b.MS {
			b.d = append(b.d, time.Duration(x*1e6))
		}
		b50, b95 := "—", "—"
		if len(b.d) > 0 {
			b50, b95 = ms(b.pct(0.5)), ms(b.pct(0.95))
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %d of %d |\n", p.name, ms(p.one.pct(0.5)), ms(p.one.pct(0.95)), b50, b95, len(p.b.Errors), sdkBurst)
	}
	for _, f := range published {
		fmt.Printf("| %s, published by ComputeSDK | %d ms | %d ms | %d ms | %d ms | |\n", f.name, f.p50, f.p95, f.b50, f.b95)
	}
	fmt.Printf("\nThe published rows are ComputeSDK's public benchmarks of each provider's own service (create → first command, p50 and p95, one at a time and %d at once), cited for scale: another client, network and machine.\n", sdkBurst)

	fmt.Printf("\nThe warm pool (target %d) in each burst of %d; claimed warm and cold are the pool's hits and misses, refills the sandboxes its replenisher built meanwhile (one at a time, in the background):\n\n", warm, sdkBurst)
	fmt.Println("| burst | last command finished | claimed warm | started cold | refills during and after | pool empty after | back to target after the last command | failed refills | at capacity | connections shed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, p := range paths {
		r := p.pool
		empty := "never"
		if r.sawEmpty {
			empty = ms(r.emptied)
		} else {
			empty += fmt.Sprintf(" (fewest ready: %d)", r.minIdle)
		}
		fmt.Printf("| %s | %s | %d | %d | %d | %s | %s | %d | %v | %d |\n", p.name, ms(time.Duration(p.b.Wall*1e6)),
			r.after.Hits-r.before.Hits, r.after.Misses-r.before.Misses, r.after.Created-r.before.Created, empty, ms(r.refilled),
			r.after.CreateFailures-r.before.CreateFailures, r.atCapacity, r.shed)
	}
	for _, p := range paths {
		if len(p.b.Errors) == 0 {
			continue
		}
		fmt.Printf("\nFailures, %s (%d of %d):\n\n", p.name, len(p.b.Errors), sdkBurst)
		for _, w := range failureReasons(p.b) {
			fmt.Printf("- %d× %s\n", w.n, w.why)
		}
	}
	if failed := slices.ContainsFunc(paths, func(p *sdkPath) bool { return len(p.b.Errors) > 0 }); !failed {
		fmt.Printf("\nNo create or command failed in any burst.\n")
	}
	return nil
}

// sdkBurstRun asks p's worker for a burst while sampling the pool, and
// waits for the pool to be back at its target.
func sdkBurstRun(c *client.Client, p *sdkPath, warm int) error {
	rec := &p.pool
	pools := func() api.PoolStats {
		ps, err := c.Pools(context.Background())
		if err != nil || len(ps) == 0 {
			return api.PoolStats{}
		}
		return ps[0]
	}
	shed0 := connsShed(c)
	rec.before = pools()
	rec.minIdle = rec.before.Idle
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex // guards rec's samples while the burst runs
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			st := pools()
			mu.Lock()
			if st.Idle < rec.minIdle {
				rec.minIdle = st.Idle
			}
			if st.Idle == 0 && !rec.sawEmpty {
				rec.sawEmpty, rec.emptied = true, time.Since(start)
			}
			rec.atCapacity = rec.atCapacity || st.AtCapacity
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	err := p.w.ask(fmt.Sprintf("burst %s %d", p.path, sdkBurst), &p.b)
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if p.b.Error != "" {
		return fmt.Errorf("%s: burst: %s", p.name, p.b.Error)
	}
	// The last command finished at start+Wall (the worker's clock, from
	// its first create); the teardown (Kill) came after it.
	last := start.Add(time.Duration(p.b.Wall * 1e6))
	for {
		st := pools()
		rec.atCapacity = rec.atCapacity || st.AtCapacity
		if st.Idle >= warm {
			rec.refilled = time.Since(last)
			break
		}
		if time.Since(last) > 2*time.Minute {
			return fmt.Errorf("%s: the pool did not refill in 2 minutes (%+v)", p.name, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
	rec.after = pools()
	rec.shed = connsShed(c) - shed0
	return nil
}

var shedLine = regexp.MustCompile(`(?m)^airlock_api_connections_shed_total (\d+)$`)

// connsShed is the daemon's count of TCP connections closed as soon as
// accepted (netlimit's share of one address under pressure), from
// /metrics.
func connsShed(c *client.Client) int64 {
	hc, url := c.Endpoint("/metrics")
	resp, err := hc.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := shedLine.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

type reason struct {
	why string
	n   int
}

var sandboxIDs = regexp.MustCompile(`\b[0-9a-f]{12,}\b`)

// failureReasons groups a burst's failures by their message (ids made
// alike), most frequent first.
func failureReasons(b sdkBurstResult) []reason {
	count := map[string]int{}
	for _, e := range b.Errors {
		count[sandboxIDs.ReplaceAllString(strings.TrimSpace(e.Error), "…")]++
	}
	var out []reason
	for w, k := range count {
		out = append(out, reason{w, k})
	}
	slices.SortFunc(out, func(a, b reason) int { return b.n - a.n })
	return out
}
