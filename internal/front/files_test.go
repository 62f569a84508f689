package front

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/cluster"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/httpx"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/tokens"
)

const testKey = "front-test-key-0123456789"

// fakeNode is a node's E2B file API as a daemon serves it: a call with
// its sandbox's id and access token, or a URL its sandbox signed, is
// read whole; any other is refused before a byte of its body is read.
type fakeNode struct {
	name, id, token string
	url             string
	got             atomic.Int64 // bytes of bodies read
}

func startFakeNode(t *testing.T, name string) *fakeNode {
	t.Helper()
	n := &fakeNode{name: name, id: "s_" + name + "-0123abcd", token: "token-of-" + name}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ok := r.Header.Get("E2b-Sandbox-Id") == n.id && r.Header.Get("X-Access-Token") == n.token ||
			q.Has("signature") && q.Get("signature") == e2b.Signature(q.Get("path"), "write", q.Get("username"), n.token, 0)
		switch {
		case !ok && q.Has("signature"):
			// As a node: a signature none of its sandboxes made.
			e2b.WriteAPIError(w, http.StatusUnauthorized, "invalid signature")
			return
		case !ok:
			e2b.WriteAPIError(w, http.StatusBadGateway, "sandbox was not found, or the access token is not its")
			return
		}
		k, err := io.Copy(io.Discard, r.Body)
		n.got.Add(k)
		if err != nil {
			e2b.WriteAPIError(w, http.StatusBadRequest, "the body: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `[{"name":"a","type":"file","path":"/home/user/a","size":%d}]`, k)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpx.New(h, httpx.Options{})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	n.url = "http://" + ln.Addr().String()
	return n
}

func (n *fakeNode) node() cluster.Node {
	return cluster.Node{Name: n.name, Endpoint: n.url, E2B: n.url, Expires: time.Now().Add(time.Hour)}
}

// serveFront serves a front of nodes on two listeners as `airlock front`
// does (Listener, Server): its API's address and its E2B API's.
func serveFront(t *testing.T, nodes ...cluster.Node) (f *Front, api, e2bAddr string) {
	t.Helper()
	t.Setenv("TEST_FRONT_KEY", testKey)
	cfg, err := config.Parse("airlock.yaml", []byte("server:\n  tokens: [{name: agent, secret: key, tools: ['*']}]\nsecrets:\n  key: {env: TEST_FRONT_KEY}\n"))
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokens.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f = New(cluster.StaticView(nodes...), toks, slog.New(slog.DiscardHandler))
	addrs := make([]string, 2)
	for i, h := range []http.Handler{f.Handler(), f.E2BHandler()} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := f.Server(h)
		go srv.Serve(Listener(ln))
		t.Cleanup(func() { srv.Close() })
		addrs[i] = ln.Addr().String()
	}
	return f, addrs[0], addrs[1]
}

// TestFilesRefusedUnread sends 100 uploads of 20 MiB at a front's E2B
// API, none with a credential a node would accept: no sandbox id nor
// signature, a forged signature, a sandbox id without its access token,
// with another's. Each is refused without its body read, the front's
// heap stays within 64 MiB of where it was, and no node reads a byte.
// Before, the front read up to 20 MiB of each call without a sandbox id
// before asking any node: 100 connections took it from 15 MB to 2.9 GB.
func TestFilesRefusedUnread(t *testing.T) {
	a, b := startFakeNode(t, "node-a"), startFakeNode(t, "node-b")
	_, _, e2bAddr := serveFront(t, a.node(), b.node())
	const size = 20 << 20
	kinds := []struct {
		name, target, headers string
		want                  int
	}{
		{"no credential", "/files?path=a", "", http.StatusBadRequest},
		{"a forged signature", "/files?path=a&signature=v1_" + strings.Repeat("A", 43), "", http.StatusUnauthorized},
		{"a sandbox id without its token", "/files?path=a", "E2b-Sandbox-Id: " + a.id + "\r\n", http.StatusBadGateway},
		{"another sandbox's token", "/files?path=a", "E2b-Sandbox-Id: " + a.id + "\r\nX-Access-Token: " + b.token + "\r\n", http.StatusBadGateway},
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	chunk := make([]byte, 1<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]map[string]int{}
	for i := range 100 {
		k := kinds[i%len(kinds)]
		wg.Go(func() {
			outcome := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				if got[k.name] == nil {
					got[k.name] = map[string]int{}
				}
				got[k.name][s]++
			}
			c, err := net.Dial("tcp", e2bAddr)
			if err != nil {
				outcome(err.Error())
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", k.target, e2bAddr, k.headers, size)
			// The body is sent as fast as the front takes it, the
			// answer read meanwhile.
			go func() {
				for sent := 0; sent < size; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				outcome("no answer: " + err.Error())
				return
			}
			resp.Body.Close()
			outcome(resp.Status)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(before)
	t.Logf("the heap in use grew by %d MiB at most; answers: %v", grew>>20, got)
	if grew > 64<<20 {
		t.Errorf("the heap in use grew by %d MiB under 100 uploads without a credential", grew>>20)
	}
	for _, k := range kinds {
		want := fmt.Sprintf("%d %s", k.want, http.StatusText(k.want))
		if got[k.name][want] != 25 {
			t.Errorf("%s: answers %v, want 25 x %s", k.name, got[k.name], want)
		}
	}
	if n := a.got.Load() + b.got.Load(); n != 0 {
		t.Errorf("the nodes read %d bytes of refused uploads", n)
	}
}

// TestFilesThroughFront: uploads with a credential stream through a
// front: a signed one to the node whose sandbox signed it (the other
// refuses it unread), one by sandbox id and token to its node, one whose
// bytes come slowly but never stop for BodyStall; one that stops is cut.
// Past maxUploads at once, the next is refused before its body.
func TestFilesThroughFront(t *testing.T) {
	defer func(d time.Duration) { httpx.BodyStall = d }(httpx.BodyStall)
	httpx.BodyStall = time.Second
	a, b := startFakeNode(t, "node-a"), startFakeNode(t, "node-b")
	f, _, e2bAddr := serveFront(t, a.node(), b.node())
	base := "http://" + e2bAddr
	post := func(t *testing.T, url string, hdr map[string]string, body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(rb)
	}
	const size = 8 << 20
	t.Run("signed", func(t *testing.T) {
		a.got.Store(0)
		b.got.Store(0)
		sig := e2b.Signature("a", "write", "user", b.token, 0)
		status, body := post(t, base+"/files?path=a&username=user&signature="+sig, nil, bytes.NewReader(make([]byte, size)))
		if status != http.StatusOK || a.got.Load() != 0 || b.got.Load() != size {
			t.Fatalf("%d %s; node-a read %d bytes, node-b %d, want 0 and %d", status, body, a.got.Load(), b.got.Load(), size)
		}
	})
	t.Run("by sandbox id", func(t *testing.T) {
		a.got.Store(0)
		hdr := map[string]string{"E2b-Sandbox-Id": a.id, "X-Access-Token": a.token}
		status, body := post(t, base+"/files?path=a", hdr, bytes.NewReader(make([]byte, size)))
		if status != http.StatusOK || a.got.Load() != size {
			t.Fatalf("%d %s; node-a read %d bytes, want %d", status, body, a.got.Load(), size)
		}
	})
	t.Run("slow but steady", func(t *testing.T) {
		a.got.Store(0)
		pr, pw := io.Pipe()
		go func() {
			// 3 s in all, never a second without bytes.
			for range 10 {
				pw.Write(make([]byte, 1000))
				time.Sleep(300 * time.Millisecond)
			}
			pw.Close()
		}()
		hdr := map[string]string{"E2b-Sandbox-Id": a.id, "X-Access-Token": a.token}
		status, body := post(t, base+"/files?path=a", hdr, pr)
		if status != http.StatusOK || a.got.Load() != 10000 {
			t.Fatalf("%d %s; node-a read %d bytes, want 10000", status, body, a.got.Load())
		}
	})
	t.Run("stalled", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.1", e2bAddr)
		fmt.Fprintf(c, "POST /files?path=a HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Length: 1000\r\n\r\nhalf", e2bAddr, a.id, a.token)
		testutil.ClosedWithin(t, []net.Conn{c}, 10*time.Second)
	})
	t.Run("too many at once", func(t *testing.T) {
		for range maxUploads {
			f.uploads <- struct{}{}
		}
		defer func() {
			for range maxUploads {
				<-f.uploads
			}
		}()
		hdr := map[string]string{"E2b-Sandbox-Id": a.id, "X-Access-Token": a.token}
		if status, body := post(t, base+"/files?path=a", hdr, strings.NewReader("x")); status != http.StatusServiceUnavailable {
			t.Fatalf("%d %s, want 503", status, body)
		}
	})
}

// TestStalledCallers attacks both of a front's listeners with 600
// connections from one address that send a request's headers without a
// credential, declaring a body that never comes, and 600 more that never
// end their headers. A caller from another address is still answered
// within a second, and every stalled body's connection is closed.
// Before, each refused request's body was waited for without end, and
// 512 of them (a listener's bound) closed the front to everyone.
func TestStalledCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	a := startFakeNode(t, "node-a")
	_, api, e2bAddr := serveFront(t, a.node())
	for _, tt := range []struct {
		name, addr, stalled, valid string
		want                       int
	}{
		{"API", api,
			"POST /v1/runs HTTP/1.1\r\nHost: front\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
			"GET /healthz HTTP/1.1\r\nHost: front\r\n\r\n", http.StatusNoContent},
		{"E2B API", e2bAddr,
			"POST /files?path=a HTTP/1.1\r\nHost: front\r\nE2b-Sandbox-Id: " + a.id + "\r\nContent-Length: 1000\r\n\r\n",
			"GET /health HTTP/1.1\r\nHost: front\r\n\r\n", http.StatusNoContent},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bodies := testutil.Stall(t, "127.0.0.2", tt.addr, 600, tt.stalled)
			testutil.Stall(t, "127.0.0.2", tt.addr, 600, "GET /healthz HTTP/1.1\r\nHost: ")
			start := time.Now()
			c := testutil.DialFrom(t, "127.0.0.1", tt.addr)
			c.SetDeadline(start.Add(time.Second))
			if _, err := io.WriteString(c, tt.valid); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("a caller was not answered within 1 s: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("a caller: %s, want %d", resp.Status, tt.want)
			}
			t.Logf("answered in %v", time.Since(start))
			testutil.ClosedWithin(t, bodies, 5*time.Second)
		})
	}
}
