package front_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/front"
	"github.com/airlockhq/airlock/internal/kube/kubetest"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
)

const (
	key       = "cluster-test-key-0123456789"
	narrowKey = "cluster-test-narrow-0123456789"
	tenantKey = "cluster-test-tenant-0123456789"
)

// proc is an airlock process of the test: a node or a front.
type proc struct {
	name, addr string
	cfg        string // its config file
	stdout     string // the file of its standard output
	e2b        string // a front's E2B API
	cmd        *exec.Cmd
	log        *os.File
	done       chan struct{}
}

func freeAddr(t *testing.T) string { return testutil.FreeAddr(t) }

// kubeYAML is the cluster section's kubernetes part for cp.
func kubeYAML(t *testing.T, cp *kubetest.ControlPlane, user string) string {
	return fmt.Sprintf("  kubernetes: {server: %q, token_file: %s, ca_file: %s, namespace: %s}\n",
		cp.URL, cp.TokenFile(t, user), cp.CAFile(t), kubetest.Namespace)
}

func start(t *testing.T, name string, args []string, cfg string) *proc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd := exec.Command(testutil.Binary(t, "github.com/airlockhq/airlock/cmd/airlock"), append(args, "--config", cfgPath)...)
	cmd.Env = append(os.Environ(), "TEST_CLUSTER_KEY="+key, "TEST_NARROW_KEY="+narrowKey, "TEST_TENANT_KEY="+tenantKey)
	cmd.Stdout, cmd.Stderr = stdout, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: log, cfg: cfgPath, stdout: stdout.Name(), done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(40 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("%s's log:\n%s", name, b)
		}
	})
	return p
}

// startNode runs `airlock serve` as node name, with tool sh warm or not.
func startNode(t *testing.T, cp *kubetest.ControlPlane, name string, warm int) *proc {
	t.Helper()
	addr, e2bAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("server:\n  tcp: %s\n  e2b: %s\n  tokens: [{name: agent, secret: key, tools: ['*']}, {name: tenant, secret: tenant, tools: ['*']}]\nsecrets:\n  key: {env: TEST_CLUSTER_KEY}\n  tenant: {env: TEST_TENANT_KEY}\n"+
		"tools:\n  sh: {pool: {warm: %d}}\n  echo: {command: [echo, \"{word}\"], inputs: {word: {required: true}}}\naudit: {export: stdout}\ncluster:\n  node: %s\n", addr, e2bAddr, warm, name) + kubeYAML(t, cp, kubetest.ServiceAccount("airlock-node").Name)
	p := start(t, name, []string{"serve", "--socket", filepath.Join(dir, "sock"), "--audit", filepath.Join(dir, "audit.db"),
		"--state-dir", "/run/airlock-test-front-" + name, "--cgroup-parent", testutil.CgroupParent("/airlock-test-front-" + name), "--grace", "20s"}, cfg)
	p.addr = addr
	return p
}

// startFront runs `airlock front` and waits until it sees n nodes.
func startFront(t *testing.T, cp *kubetest.ControlPlane, name string, addr string) *proc {
	t.Helper()
	if addr == "" {
		addr = freeAddr(t)
	}
	e2bAddr := freeAddr(t)
	cfg := fmt.Sprintf("server:\n  tcp: %s\n  e2b: %s\n  tokens: [{name: agent, secret: key, tools: ['*']}, {name: narrow, secret: narrow, tools: [python]}, {name: tenant, secret: tenant, tools: ['*']}]\n"+
		"secrets:\n  key: {env: TEST_CLUSTER_KEY}\n  narrow: {env: TEST_NARROW_KEY}\n  tenant: {env: TEST_TENANT_KEY}\n"+
		// The nodes' config serves a front too: its tools are the
		// names tokens may use.
		"tools:\n  sh: {}\n  python: {}\ncluster:\n", addr, e2bAddr) + kubeYAML(t, cp, kubetest.ServiceAccount("airlock-front").Name)
	p := start(t, name, []string{"front"}, cfg)
	p.addr, p.e2b = addr, e2bAddr
	return p
}

// children are the sandbox cgroups under a node's cgroup parent.
func children(t *testing.T, node string) map[string]bool {
	t.Helper()
	dir := "/sys/fs/cgroup/pids" + testutil.CgroupParent("/airlock-test-front-"+node)
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		dir = "/sys/fs/cgroup" + testutil.CgroupParent("/airlock-test-front-"+node)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() && sandboxID.MatchString(e.Name()) {
			out[e.Name()] = true
		}
	}
	return out
}

var sandboxID = regexp.MustCompile(`^[0-9a-f]{12}$`)

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// live waits until the named nodes' leases are live and not draining.
func live(t *testing.T, cp *kubetest.ControlPlane, names ...string) {
	t.Helper()
	liveSince(t, cp, time.Time{}, names...)
}

// liveSince is live for leases renewed after since.
func liveSince(t *testing.T, cp *kubetest.ControlPlane, since time.Time, names ...string) {
	t.Helper()
	kc := cp.Client(t, "admin")
	waitFor(t, fmt.Sprintf("nodes %v registered", names), 60*time.Second, func() bool {
		leases, _, err := kc.ListLeases(context.Background(), cluster.Selector)
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, l := range leases {
			if !l.Expired(time.Now()) && l.Spec.RenewTime.After(since) && !strings.Contains(l.Metadata.Annotations[cluster.AnnotationStats], `"draining":true`) {
				seen[l.Spec.HolderIdentity] = true
			}
		}
		for _, n := range names {
			if !seen[n] {
				return false
			}
		}
		return true
	})
}

// run runs true through the front at addr and returns the node that ran
// it.
func run(ctx context.Context, addr string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/runs", strings.NewReader(`{"tool":"sh","argv":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	if resp.StatusCode != 200 || !strings.Contains(b.String(), `"outcome":"exited"`) || !strings.Contains(b.String(), `"exit_code":0`) {
		return "", fmt.Errorf("run: %d %s", resp.StatusCode, b.String())
	}
	return resp.Header.Get(front.NodeHeader), nil
}

// TestCluster runs a cluster on this machine: a real Kubernetes API
// server and etcd, three `airlock serve` nodes registered through it
// (two warm, one cold), and two `airlock front` replicas.
func TestCluster(t *testing.T) {
	testutil.RequireRoot(t)
	top := t
	// The nodes and fronts use their service accounts' tokens, with the
	// RBAC of the manifests.
	cp := kubetest.Start(t, kubetest.ServiceAccount("airlock-node"), kubetest.ServiceAccount("airlock-front"))
	rbac, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Apply(t, "admin", rbac, false); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*proc{
		"node-a": startNode(t, cp, "node-a", 2),
		"node-b": startNode(t, cp, "node-b", 2),
		"node-c": startNode(t, cp, "node-c", 0),
	}
	live(t, cp, "node-a", "node-b", "node-c")
	fa, fb := startFront(t, cp, "front-a", ""), startFront(t, cp, "front-b", "")
	for _, f := range []*proc{fa, fb} {
		waitFor(t, f.name+" ready", 30*time.Second, func() bool {
			resp, err := http.Get("http://" + f.addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == 204
		})
	}
	ctx := context.Background()

	t.Run("placement prefers warm nodes", func(t *testing.T) {
		// Once the leases say 2 ready on a and b (their pools filled
		// after they registered), none on c, the first placements all go
		// warm.
		waitFor(t, "the warm nodes' leases to say so", 30*time.Second, func() bool {
			leases, _, err := cp.Client(t, "admin").ListLeases(ctx, cluster.Selector)
			if err != nil {
				return false
			}
			warm := 0
			for _, l := range leases {
				if strings.Contains(l.Metadata.Annotations[cluster.AnnotationStats], `"sh":{"warm":2,"idle":2}`) {
					warm++
				}
			}
			return warm == 2
		})
		time.Sleep(200 * time.Millisecond) // the fronts' watches
		for i := range 2 {
			n, err := run(ctx, []string{fa.addr, fb.addr}[i])
			if err != nil {
				t.Fatal(err)
			}
			if n == "node-c" {
				t.Errorf("run %d placed on the cold node-c", i)
			}
		}
	})

	runs := 1000
	if testing.Short() {
		runs = 200 // the race detector's pass
	}
	t.Run("runs through both fronts", func(t *testing.T) {
		total, workers := runs, 8
		var mu sync.Mutex
		per := map[string]int{}
		var errs []error
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					n, err := run(ctx, []string{fa.addr, fb.addr}[i%2])
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						per[n]++
					}
					mu.Unlock()
				}
			}()
		}
		t0 := time.Now()
		for i := range total {
			next <- i
		}
		close(next)
		wg.Wait()
		t.Logf("%d runs in %v: %v", total, time.Since(t0).Round(time.Millisecond), per)
		if len(errs) > 0 {
			t.Fatalf("%d of %d runs failed; the first: %v", len(errs), total, errs[0])
		}
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			if per[n] == 0 {
				t.Errorf("no run on %s: %v", n, per)
			}
		}
	})

	ca, cb := client.NewTCP(fa.addr, key), client.NewTCP(fb.addr, key)
	fa2addr := fa.addr // front-a's address, kept when it restarts
	t.Run("sessions stick to their node", func(t *testing.T) {
		s, err := ca.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		if err != nil {
			t.Fatal(err)
		}
		node := cluster.NodeOfID(s.ID)
		if nodes[node] == nil {
			t.Fatalf("session id %q names no node of the cluster", s.ID)
		}
		if r, err := ca.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/f"}}); err != nil || r.Outcome != result.Exited {
			t.Fatalf("exec through front-a: %+v %v", r, err)
		}
		// Through the other front: the same sandbox.
		r, err := cb.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/f"}})
		if err != nil || string(r.Stdout) != "kept\n" {
			t.Fatalf("exec through front-b: %+v %v", r, err)
		}
		if err := cb.DeleteSession(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	})

	// The newest SDK pinned, and an older one, whose create and connect
	// are the v1 calls (POST /sandboxes).
	for _, sdk := range []struct{ name, env string }{{"", "AIRLOCK_TEST_E2B_MODULES"}, {" 2.50", "AIRLOCK_TEST_E2B_OLD_MODULES"}} {
		t.Run("the E2B SDK"+sdk.name+" through a front", func(t *testing.T) {
			mods := os.Getenv(sdk.env)
			if mods == "" {
				t.Skipf("%s is not set (scripts/test installs the E2B SDKs)", sdk.env)
			}
			cmd := exec.Command("node", "testdata/e2b_front.mjs")
			base := "http://" + fb.e2b
			cmd.Env = append(os.Environ(), "E2B_SDK="+filepath.Join(mods, "e2b", "dist", "index.mjs"), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+key)
			out, err := cmd.Output()
			t.Logf("the SDK said:\n%s", out)
			if err != nil {
				t.Fatalf("the SDK's script: %v", err)
			}
			steps := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var l struct {
					K string          `json:"k"`
					V json.RawMessage `json:"v"`
				}
				if json.Unmarshal([]byte(line), &l) == nil {
					steps[l.K] = string(l.V)
				}
			}
			var id string
			_ = json.Unmarshal([]byte(steps["created"]), &id)
			if nodes[cluster.NodeOfID(id)] == nil {
				t.Errorf("the sandbox id %q names no node", id)
			}
			for k, want := range map[string]string{
				"run": `"hi from airlock-init\n"`, "bg": `"bg\n"`, "read": `"via the front"`, "download": `"via the front"`, "upload": `[200,3145728]`,
				"list": `["` + id + `"]`, "info": `"sh"`, "kill": `true`, "after": `"SandboxNotFoundError"`, "pages": `[2,true]`, "wrongkey": `"AuthenticationError"`,
				"alive": `true`, "dead": `false`, "connect": `"via the front"`,
			} {
				if steps[k] != want {
					t.Errorf("%s: %s, want %s", k, steps[k], want)
				}
			}
		})
	}

	t.Run("lists across nodes", func(t *testing.T) {
		s, err := ca.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		if err != nil {
			t.Fatal(err)
		}
		defer ca.DeleteSession(ctx, s.ID)
		var pools []struct {
			Node string `json:"node"`
			Name string `json:"name"`
		}
		getJSON(t, "http://"+fb.addr+"/v1/pools", &pools)
		seen := map[string]bool{}
		for _, p := range pools {
			if p.Name == "sh" {
				seen[p.Node] = true
			}
		}
		if len(seen) != 3 {
			t.Errorf("pools through a front: %+v, want sh on 3 nodes", pools)
		}
		var ps struct {
			Sessions []struct {
				ID   string `json:"id"`
				Node string `json:"node"`
			} `json:"sessions"`
		}
		getJSON(t, "http://"+fb.addr+"/v1/ps", &ps)
		found := false
		for _, x := range ps.Sessions {
			found = found || (x.ID == s.ID && x.Node == cluster.NodeOfID(s.ID))
		}
		if !found {
			t.Errorf("ps through a front: %+v, want session %s on its node", ps, s.ID)
		}
		var ce *client.Error
		if err := cb.KillRun(ctx, "r_0123456789abcdef"); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("killing a run no node has: %v", err)
		}
	})

	t.Run("MCP through the fronts", func(t *testing.T) {
		hc := &http.Client{Transport: bearer{key}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + fa2addr + "/mcp", HTTPClient: hc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "relayed"}})
		if err != nil || r.IsError || len(r.Content) == 0 || r.Content[0].(*mcp.TextContent).Text != "relayed\n" {
			t.Fatalf("an MCP call through a front: %+v %v", r, err)
		}
		node, _, ok := strings.Cut(cs.ID(), "~")
		if !ok || nodes[node] == nil {
			t.Fatalf("the MCP session id %q names no node", cs.ID())
		}
		// The same session through the other front.
		req, _ := http.NewRequest("POST", "http://"+fb.addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":99,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"echo"`) || resp.Header.Get(front.NodeHeader) != node {
			t.Errorf("the MCP session through the other front: %d %s %s", resp.StatusCode, resp.Header.Get(front.NodeHeader), b)
		}
	})

	t.Run("a terminal through a front", func(t *testing.T) {
		var screen strings.Builder
		r, err := cb.RunTTY(ctx, api.RunRequest{Tool: "sh", Argv: []string{"sh", "-c", `tty; stty size; read -r line; echo "got:$line"; exit 3`}},
			client.TTY{Size: api.TTYSize{Rows: 30, Cols: 100}, Stdin: strings.NewReader("typed\n"), Output: &screen})
		if err != nil || r.Outcome != result.Exited || r.ExitCode != 3 {
			t.Fatalf("a terminal run through a front: %+v %v\n%s", r, err, screen.String())
		}
		for _, want := range []string{"/dev/pts/", "30 100", "got:typed"} {
			if !strings.Contains(screen.String(), want) {
				t.Errorf("the terminal showed %q, without %q", screen.String(), want)
			}
		}
	})

	t.Run("the command line through the fronts", func(t *testing.T) {
		cli := func(args ...string) (string, string, int) {
			t.Helper()
			cmd := exec.Command(testutil.Binary(t, "github.com/airlockhq/airlock/cmd/airlock"), args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "AIRLOCK_TOKEN=" + key}
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			return out.String(), errb.String(), cmd.ProcessState.ExitCode()
		}
		ha, hb := "http://"+fa.addr, "http://"+fb.addr
		if out, errs, code := cli("run", "--host", ha, "--tool", "sh", "--", "sh", "-c", "echo via-front; exit 2"); code != 2 || out != "via-front\n" {
			t.Fatalf("airlock run --host FRONT: exit %d %q %q", code, out, errs)
		}
		out, errs, code := cli("session", "create", "--host", ha, "--tool", "sh")
		if code != 0 {
			t.Fatalf("session create through a front: %d %q", code, errs)
		}
		id := strings.TrimSpace(out)
		if out, errs, code := cli("session", "exec", "--host", hb, id, "--", "sh", "-c", "echo other-front > f; cat f"); code != 0 || out != "other-front\n" {
			t.Fatalf("session exec through the other front: exit %d %q %q", code, out, errs)
		}
		if out, errs, code := cli("ps", "--host", hb); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "NODE") {
			t.Fatalf("ps through a front: exit %d %q %q", code, out, errs)
		}
		if out, errs, code := cli("audit", "--host", hb, "--kind", "session.created", "--limit", "1000"); code != 0 || !strings.Contains(out, "node=node-") || !strings.Contains(out, "session="+id) {
			t.Fatalf("the merged audit through a front: exit %d %q %q", code, out, errs)
		}
		if _, errs, code := cli("kill", "--host", ha, id); code != 0 {
			t.Fatalf("kill through a front: %d %q", code, errs)
		}
	})

	t.Run("a token is checked at the front", func(t *testing.T) {
		bad := client.NewTCP(fa.addr, "not-a-token-of-this-cluster")
		var ce *client.Error
		if _, err := bad.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 401 {
			t.Errorf("a run with a wrong token: %v", err)
		}
		if _, err := ca.Run(ctx, api.RunRequest{Tool: "nosuchtool", Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("a run of a tool no node has: %v", err)
		}
		narrow := client.NewTCP(fb.addr, narrowKey)
		if _, err := narrow.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Status != 403 {
			t.Errorf("a run of a tool the token may not use: %v", err)
		}
	})

	t.Run("the console and the metrics across the nodes", func(t *testing.T) {
		base := "http://" + fa.addr
		// The page, and a token's login on it (a front has no socket:
		// no one-time code).
		resp, err := http.Get(base + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") || !strings.Contains(string(page), "console.js") {
			t.Fatalf("the console's page through a front: %d %v", resp.StatusCode, resp.Header)
		}
		if consoleLogin(t, fa.addr, "not-a-token") != nil {
			t.Fatal("a wrong token logged in")
		}
		ck := consoleLogin(t, fa.addr, key)
		if ck == nil {
			t.Fatal("the token did not log in")
		}
		get := func(path string, hdr map[string]string) (int, string) {
			req, _ := http.NewRequest("GET", base+path, nil)
			req.AddCookie(ck)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get("/console/whoami", nil); code != 200 || !strings.Contains(body, `"token:agent"`) {
			t.Errorf("whoami through a front: %d %s", code, body)
		}
		// The page's reads, as the session's token, from every node.
		if code, body := get("/v1/pools", nil); code != 200 || !strings.Contains(body, `"node":"node-a"`) || !strings.Contains(body, `"node":"node-c"`) {
			t.Errorf("pools with the console's session: %d %s", code, body)
		}
		code, m := get("/metrics", nil)
		if code != 200 {
			t.Fatalf("/metrics with the console's session: %d %s", code, m)
		}
		for _, want := range []string{
			"# TYPE airlock_run_outcomes_total counter\n",
			`airlock_run_outcomes_total{node="node-a",tool="sh",outcome="exited"} `,
			`airlock_run_outcomes_total{node="node-b",tool="sh",outcome="exited"} `,
			`airlock_capacity_sandboxes{node="node-c"} `,
			`airlock_claim_duration_seconds_bucket{node="node-a",tool="sh",pool="warm",le="+Inf"} `,
			"airlock_front_nodes_live 3\n",
			"airlock_front_nodes_unreached 0\n",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("the front's /metrics lacks %q", want)
			}
		}
		if n := strings.Count(m, "# TYPE airlock_run_outcomes_total "); n != 1 {
			t.Errorf("airlock_run_outcomes_total is described %d times, want once", n)
		}
		// A change needs the console's header; the cookie alone is no
		// caller.
		req, _ := http.NewRequest("DELETE", base+"/v1/runs/r_0000000000000000", nil)
		req.AddCookie(ck)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
			t.Errorf("a DELETE with the cookie alone: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		req.Header.Set("X-Airlock-Console", "1")
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
			t.Errorf("a DELETE with the cookie and the header: %v %v (want 404: no such run)", resp, err)
		} else {
			resp.Body.Close()
		}
		if resp, err := http.Get(base + "/metrics"); err != nil || resp.StatusCode != 401 {
			t.Errorf("/metrics without a token: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	})

	t.Run("the console in a browser across the nodes", func(t *testing.T) {
		pw := os.Getenv("AIRLOCK_TEST_PLAYWRIGHT_MODULES")
		if pw == "" {
			t.Skip("AIRLOCK_TEST_PLAYWRIGHT_MODULES is not set (scripts/test installs playwright-core and Debian's chromium)")
		}
		pw = filepath.Join(pw, "playwright-core", "index.mjs")
		// What the nodes' capacities add up to, as their metrics say.
		req, _ := http.NewRequest("GET", "http://"+fa.addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		capacity := 0
		for _, l := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(l, "airlock_capacity_sandboxes{") {
				var n int
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &n)
				capacity += n
			}
		}
		// A run in flight, for the page to show and kill.
		liveDone := make(chan *result.Result, 1)
		go func() {
			r, _ := ca.Run(context.WithoutCancel(ctx), api.RunRequest{Tool: "sh", Argv: []string{"sleep", "50"}})
			liveDone <- r
		}()
		var live, liveNode string
		waitFor(t, "the run in flight in the merged list", 15*time.Second, func() bool {
			var ps struct {
				Runs []struct {
					ID   string `json:"id"`
					Node string `json:"node"`
				} `json:"runs"`
			}
			getJSON(t, "http://"+fa.addr+"/v1/ps", &ps)
			if len(ps.Runs) > 0 {
				live, liveNode = ps.Runs[0].ID, ps.Runs[0].Node
			}
			return live != ""
		})
		shots := os.Getenv("AIRLOCK_TEST_SCREENSHOTS")
		if shots == "" {
			shots = t.TempDir()
		}
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("node", "testdata/console.mjs")
		cmd.Env = append(os.Environ(), "PLAYWRIGHT="+pw, "CHROMIUM=/usr/bin/chromium", "BASE=http://"+fa.addr, "TOKEN="+key,
			"SHOTS="+shots, "LIVE_RUN="+live, fmt.Sprintf("CAPACITY=%d", capacity))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		outb, err := cmd.Output()
		steps := map[string]json.RawMessage{}
		sc := bufio.NewScanner(strings.NewReader(string(outb)))
		for sc.Scan() {
			var l struct {
				K string          `json:"k"`
				V json.RawMessage `json:"v"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				steps[l.K] = l.V
			}
		}
		if err != nil || steps["fatal"] != nil {
			t.Fatalf("the browser's script: %v\n%s\n%s", err, outb, stderr.String())
		}
		for k, want := range map[string]string{
			"who":      `"as token:agent"`,
			"pools":    `["sh (node-a)","sh (node-b)","sh (node-c)"]`,
			"live":     `"sh (` + liveNode + `)"`,
			"killed":   "true",
			"killrow":  "true",
			"errors":   "[]",
			"capacity": fmt.Sprintf(`"sandboxes 0 of %d"`, capacity),
		} {
			if got := string(steps[k]); got != want && !(k == "capacity" && strings.HasSuffix(got, fmt.Sprintf(` of %d"`, capacity))) {
				t.Errorf("%s: %s, want %s", k, got, want)
			}
		}
		select {
		case r := <-liveDone:
			if r == nil || r.Outcome != result.Signaled {
				t.Errorf("the run killed from the console through the front: %+v", r)
			}
		case <-time.After(20 * time.Second):
			t.Error("the run killed from the console through the front did not end")
		}
	})

	t.Run("a front reloads its tokens", func(t *testing.T) {
		old, err := os.ReadFile(fb.cfg)
		if err != nil {
			t.Fatal(err)
		}
		lateKey := "cluster-test-late-0123456789"
		secret := filepath.Join(t.TempDir(), "late")
		if err := os.WriteFile(secret, []byte(lateKey), 0o600); err != nil {
			t.Fatal(err)
		}
		if consoleLogin(t, fb.addr, lateKey) != nil {
			t.Fatal("a token not yet in the file logged in")
		}
		// A file that does not load changes nothing.
		if err := os.WriteFile(fb.cfg, []byte("server: [\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fb.cmd.Process.Signal(syscall.SIGHUP)
		waitFor(t, "the refused reload in the front's log", 10*time.Second, func() bool {
			b, _ := os.ReadFile(fb.log.Name())
			return strings.Contains(string(b), "front: not reloaded; nothing changed")
		})
		if _, err := run(ctx, fb.addr); err != nil {
			t.Fatalf("after a refused reload: %v", err)
		}
		// A token added to the file is taken from then on (the
		// front's own check: the nodes, which check it again, would
		// have it added to theirs too), and goes once it is taken out.
		next := strings.Replace(string(old), "{name: tenant, secret: tenant, tools: ['*']}]", "{name: tenant, secret: tenant, tools: ['*']}, {name: late, secret: late, tools: [sh]}]", 1)
		next = strings.Replace(next, "secrets:\n", "secrets:\n  late: {file: "+secret+"}\n", 1)
		if next == string(old) || !strings.Contains(next, "late: {file:") {
			t.Fatalf("the front's config did not take the token:\n%s", next)
		}
		if err := os.WriteFile(fb.cfg, []byte(next), 0o600); err != nil {
			t.Fatal(err)
		}
		fb.cmd.Process.Signal(syscall.SIGHUP)
		waitFor(t, "the front to take the new token", 10*time.Second, func() bool {
			return consoleLogin(t, fb.addr, lateKey) != nil
		})
		ck := consoleLogin(t, fb.addr, lateKey)
		if err := os.WriteFile(fb.cfg, old, 0o600); err != nil {
			t.Fatal(err)
		}
		fb.cmd.Process.Signal(syscall.SIGHUP)
		waitFor(t, "the front to drop the token again", 10*time.Second, func() bool {
			return consoleLogin(t, fb.addr, lateKey) == nil
		})
		// Its console session went with it.
		req, _ := http.NewRequest("GET", "http://"+fb.addr+"/console/whoami", nil)
		req.AddCookie(ck)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
			t.Errorf("a removed token's console session: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	})

	t.Run("the merged audit is the caller's token's", func(t *testing.T) {
		// Another tenant reads the merged log through the other front
		// — a page, the tail, a follow across agent's runs — and finds
		// none of agent's events: the front passes the caller's token
		// on, and each node answers for that token only.
		const fakeKey = "sk-live-FAKEKEY-front-7d3e"
		tenant := client.NewTCP(fb.addr, tenantKey)
		now, err := tenant.AuditFeed(ctx, client.AuditQuery{Tail: true, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		// The follow goes on, page after page as airlock audit
		// --follow's, until agent's runs are all recorded.
		runsDone := make(chan struct{})
		followed := make(chan []api.AuditEvent, 1)
		go func() {
			var got []api.AuditEvent
			defer func() { followed <- got }()
			cursor, last := now.Next, false
			for !last {
				select {
				case <-runsDone:
					last = true
				default:
				}
				p, err := tenant.AuditFeed(ctx, client.AuditQuery{Cursor: cursor, Wait: time.Second, Limit: 1000})
				if err != nil {
					t.Error(err)
					return
				}
				got, cursor = append(got, p.Events...), p.Next
			}
		}()
		time.Sleep(100 * time.Millisecond)
		var runIDs []string
		for range 4 { // on more than one node
			r, err := ca.Run(ctx, api.RunRequest{Tool: "sh", Argv: []string{"echo", "--api-key", fakeKey}})
			if err != nil {
				t.Fatal(err)
			}
			runIDs = append(runIDs, r.RunID)
		}
		// agent reads its own runs' command lines through either front.
		waitFor(t, "agent's runs in the merged audit", 10*time.Second, func() bool {
			p, err := cb.AuditFeed(ctx, client.AuditQuery{Kind: "run.started", Tail: true, Limit: 1000})
			if err != nil {
				return false
			}
			n := 0
			for _, ev := range p.Events {
				if slices.Contains(runIDs, ev.Run) && strings.Contains(string(ev.Detail), fakeKey) {
					n++
				}
			}
			return n == len(runIDs)
		})
		close(runsDone)
		pages := map[string][]api.AuditEvent{"a follow": <-followed}
		for name, q := range map[string]client.AuditQuery{
			"a page":        {Limit: 1000},
			"the tail":      {Tail: true, Limit: 1000},
			"agent's runs":  {Kind: "run.started", Client: "token:agent", Limit: 1000},
			"agent's first": {Run: runIDs[0]},
		} {
			p, err := tenant.AuditFeed(ctx, q)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			pages[name] = p.Events
		}
		for name, evs := range pages {
			for _, ev := range evs {
				if ev.Client != "token:tenant" || strings.Contains(string(ev.Detail), fakeKey) {
					t.Errorf("tenant read, through %s, an event it did not cause: %+v", name, ev)
				}
			}
		}
	})

	t.Run("a killed node", func(t *testing.T) {
		// A session on node-a, then node-a killed outright.
		var s *api.Session
		for s == nil || cluster.NodeOfID(s.ID) != "node-a" {
			var err error
			if s, err = ca.CreateSession(ctx, api.SessionRequest{Tool: "sh"}); err != nil {
				t.Fatal(err)
			}
		}
		nodes["node-a"].cmd.Process.Kill()
		<-nodes["node-a"].done
		var ce *client.Error
		if _, err := cb.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); !errors.As(err, &ce) || ce.Code != api.CodeEnded || !strings.Contains(ce.Message, "node-a is gone") {
			t.Errorf("exec on the dead node's session: %v", err)
		}
		// The other front has not found it dead yet: its list says
		// whom it could not ask.
		if a, err := ca.PS(ctx); err != nil || !slices.Contains(a.Unreached, "node-a") {
			t.Errorf("ps through a front with a node just killed: %+v %v", a, err)
		}
		// Runs go on, none on node-a; those that found it dead first
		// were placed elsewhere.
		for i := range 40 {
			n, err := run(ctx, []string{fa.addr, fb.addr}[i%2])
			if err != nil {
				t.Fatalf("run %d after node-a died: %v", i, err)
			}
			if n == "node-a" {
				t.Fatalf("run %d on the dead node-a", i)
			}
		}
		// Restarted on its state, node-a sweeps what its killed
		// process left and rejoins.
		left := children(t, "node-a")
		if len(left) == 0 {
			t.Fatal("the killed node-a left no sandbox cgroups: the test kills nothing")
		}
		restarted := time.Now()
		nodes["node-a"] = startNode(top, cp, "node-a", 2)
		liveSince(t, cp, restarted, "node-a")
		now := children(t, "node-a")
		for c := range left {
			if now[c] {
				t.Errorf("cgroup %s of the killed node-a is still there after its restart", c)
			}
		}
	})

	t.Run("a front restarts", func(t *testing.T) {
		s, err := ca.CreateSession(ctx, api.SessionRequest{Tool: "sh"})
		if err != nil {
			t.Fatal(err)
		}
		fa.cmd.Process.Kill()
		<-fa.done
		fa2 := startFront(top, cp, "front-a2", fa.addr) // lives past this subtest
		fa2addr = fa2.addr
		waitFor(t, "front-a back", 30*time.Second, func() bool {
			_, err := run(ctx, fa2.addr)
			return err == nil
		})
		// The session made through the old front is found by the new.
		if r, err := client.NewTCP(fa2.addr, key).Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"true"}}); err != nil || r.Outcome != result.Exited {
			t.Errorf("exec after the front restarted: %+v %v", r, err)
		}
	})

	t.Run("a draining node", func(t *testing.T) {
		var s *api.Session
		for s == nil || cluster.NodeOfID(s.ID) != "node-b" {
			var err error
			if s, err = cb.CreateSession(ctx, api.SessionRequest{Tool: "sh"}); err != nil {
				t.Fatal(err)
			}
		}
		execDone := make(chan error, 1)
		go func() {
			r, err := cb.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "sleep 2; echo finished"}})
			if err == nil && string(r.Stdout) != "finished\n" {
				err = fmt.Errorf("the exec: %+v", r)
			}
			execDone <- err
		}()
		time.Sleep(300 * time.Millisecond)
		nodes["node-b"].cmd.Process.Signal(syscall.SIGTERM)
		// New runs avoid it at once; the exec in flight finishes.
		waitFor(t, "node-b draining", 10*time.Second, func() bool {
			leases, _, _ := cp.Client(t, "admin").ListLeases(ctx, cluster.Selector)
			for _, l := range leases {
				if l.Spec.HolderIdentity == "node-b" {
					return strings.Contains(l.Metadata.Annotations[cluster.AnnotationStats], `"draining":true`)
				}
			}
			return true
		})
		time.Sleep(500 * time.Millisecond) // the watch's news reaches the fronts
		for i := range 10 {
			n, err := run(ctx, fb.addr)
			if err != nil {
				t.Fatalf("run %d while node-b drains: %v", i, err)
			}
			if n == "node-b" {
				t.Fatalf("run %d placed on the draining node-b", i)
			}
		}
		if err := <-execDone; err != nil {
			t.Errorf("the exec in flight on the draining node: %v", err)
		}
		<-nodes["node-b"].done
		if _, err := cp.Client(t, "admin").GetLease(ctx, cluster.LeaseName("node-b")); err == nil {
			t.Error("node-b's lease is still there after it stopped")
		}
	})

	t.Run("the merged audit has every event once", func(t *testing.T) {
		// Paged through a front, 50 at a time.
		type key struct {
			node string
			id   int64
		}
		seen := map[key]bool{}
		after := ""
		last := map[string]int64{}
		for pages := 0; ; pages++ {
			var p api.ClusterAuditPage
			getJSON(t, "http://"+fa2addr+"/v1/audit?limit=50&after="+after, &p)
			if len(p.Unreached) > 0 {
				t.Fatalf("nodes unreached: %v", p.Unreached)
			}
			if len(p.Events) == 0 {
				break
			}
			for i, ev := range p.Events {
				k := key{ev.Node, ev.ID}
				if seen[k] {
					t.Fatalf("event %d of %s twice", ev.ID, ev.Node)
				}
				seen[k] = true
				if i > 0 && ev.Time.Before(p.Events[i-1].Time) {
					t.Errorf("the page is out of time order at %d of %s", ev.ID, ev.Node)
				}
				last[ev.Node] = max(last[ev.Node], ev.ID)
			}
			after = p.Next
			if pages > 10000 {
				t.Fatal("the pages never end")
			}
		}
		// Each live node's own log, read directly, up to where the
		// front's pages ended: the same events.
		total := 0
		for _, name := range []string{"node-a", "node-c"} {
			var after int64
			for {
				var p api.AuditPage
				getJSON(t, fmt.Sprintf("http://%s/v1/audit?limit=1000&after=%d", nodes[name].addr, after), &p)
				if len(p.Events) == 0 {
					break
				}
				for _, ev := range p.Events {
					if ev.ID <= last[name] {
						total++
						if !seen[key{name, ev.ID}] {
							t.Fatalf("event %d of %s (%s) is not in the front's pages", ev.ID, name, ev.Kind)
						}
					}
				}
				after = p.Next
			}
		}
		if total != len(seen) {
			t.Errorf("the front's pages hold %d events, the nodes %d", len(seen), total)
		}
		// Each run leaves several events on its node; a third of the
		// runs went to each.
		if total < runs {
			t.Errorf("only %d events after %d runs: the runs' records are missing", total, runs)
		}
		// node-c also exported each of its events as a JSON line on its
		// stdout (audit.export), for the cluster's log pipeline.
		b, err := os.ReadFile(nodes["node-c"].stdout)
		if err != nil {
			t.Fatal(err)
		}
		exported := map[int64]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var ev api.AuditEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.ID == 0 {
				t.Fatalf("node-c's stdout has a line that is not an event: %q (%v)", line, err)
			}
			exported[ev.ID] = ev.Kind
		}
		n := 0
		for k := range seen {
			if k.node == "node-c" {
				n++
				if exported[k.id] == "" {
					t.Fatalf("event %d of node-c is not in its export", k.id)
				}
			}
		}
		if n == 0 {
			t.Error("no event of node-c in the merged audit")
		}
		t.Logf("%d events of 2 nodes, each once", total)
	})
}

// consoleLogin logs in to the web console on the front at addr with
// token tok, and returns the session's cookie, or nil if refused.
func consoleLogin(t *testing.T, addr, tok string) *http.Cookie {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", "http://"+addr+"/console/login", strings.NewReader("token="+tok))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+addr)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "airlock_console" && c.Value != "" {
			return c
		}
	}
	return nil
}

// bearer adds the token to each request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// getJSON GETs a URL with the token and decodes its JSON answer.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
