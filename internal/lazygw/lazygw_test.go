package lazygw

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/result"
	"golang.org/x/sys/unix"
)

// events collects what a gateway decides.
type events struct {
	mu  sync.Mutex
	got []result.EgressEvent
}

func (e *events) add(ev result.EgressEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func (e *events) list() []result.EgressEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]result.EgressEvent(nil), e.got...)
}

func airlockd(t *testing.T) func() (string, error) {
	p := testutil.Binary(t, "github.com/airlockhq/airlock/cmd/airlockd")
	return func() (string, error) { return p, nil }
}

// query sends a DNS A query for name to the sandbox's resolver from inside
// ns and returns the answer's rcode (-1 for no answer).
func query(t *testing.T, ns *os.File, name string) int {
	t.Helper()
	rcode := -1
	err := netns.Do(ns, func() error {
		c, err := net.Dial("udp4", "127.0.0.53:53")
		if err != nil {
			return err
		}
		defer c.Close()
		q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
		for _, l := range strings.Split(name, ".") {
			q = append(append(q, byte(len(l))), l...)
		}
		q = append(q, 0, 0, 1, 0, 1)
		if _, err := c.Write(q); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 512)
		n, err := c.Read(b)
		if err != nil {
			return err
		}
		if n >= 4 {
			rcode = int(b[3] & 0xf)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return rcode
}

// helpers counts this process's children running the helper.
func helpers(t *testing.T) int {
	t.Helper()
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(Command)) {
			st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			if f := strings.Fields(string(st)); len(f) > 3 && f[3] == strconv.Itoa(os.Getpid()) {
				n++
			}
		}
	}
	return n
}

// freshNS is a new network namespace with only lo, closed with the test.
func freshNS(t *testing.T) *os.File {
	t.Helper()
	testutil.RequireRoot(t)
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestQuiet: a gateway nothing reaches starts no helper, says it is quiet,
// and its listeners close with it.
func TestQuiet(t *testing.T) {
	ns := freshNS(t)
	var ev events
	g, err := Start(ns, func() (string, error) { t.Error("the helper was looked for"); return "", errors.New("no") }, Config{SandboxID: "s1"}, ev.add, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Quiet() {
		t.Error("a fresh gateway is not quiet")
	}
	if err := g.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	err = netns.Do(ns, func() error {
		c, err := net.Dial("tcp4", "127.0.0.2:3128")
		if err == nil {
			c.Close()
			return errors.New("the proxy still accepts after Close")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if len(ev.list()) != 0 {
		t.Errorf("events from a quiet gateway: %+v", ev.list())
	}
}

// TestFirstUse: a query starts the helper, which answers it (REFUSED: no
// name is allowed) and reports the decision; the gateway is no longer
// quiet, and Close leaves no helper behind.
func TestFirstUse(t *testing.T) {
	ns := freshNS(t)
	var ev events
	var warn bytes.Buffer
	g, err := Start(ns, airlockd(t), Config{Tool: "t", SandboxID: "s2", Allow: []string{"allowed.test:443"}}, ev.add, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if rc := query(t, ns, "denied.test"); rc != 5 {
		t.Errorf("rcode %d, want REFUSED (5)", rc)
	}
	if g.Quiet() {
		t.Error("quiet after a query")
	}
	// The decision is reported as it is made, before Close.
	deadline := time.Now().Add(10 * time.Second)
	for len(ev.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Close(t.Context()); err != nil {
		t.Errorf("Close: %v (helper said %q)", err, warn.String())
	}
	got := ev.list()
	if len(got) == 0 || got[0].Kind != "dns" || got[0].Allow || got[0].Destination != "denied.test" || got[0].Sandbox != "s2" || got[0].Tool != "t" {
		t.Errorf("events %+v, want one refused dns query of denied.test, labelled", got)
	}
	if n := helpers(t); n != 0 {
		t.Errorf("%d helpers left after Close", n)
	}
}

// TestHelperMissing: with no helper to start, the first use is refused at
// once (the listeners close) and the reason goes to the warning.
func TestHelperMissing(t *testing.T) {
	ns := freshNS(t)
	var warn bytes.Buffer
	var mu sync.Mutex
	g, err := Start(ns, func() (string, error) { return "", errors.New("airlockd not found here") }, Config{SandboxID: "s3"}, nil, &lockedWriter{&mu, &warn})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	err = netns.Do(ns, func() error {
		c, err := net.Dial("tcp4", "127.0.0.2:3128")
		if err != nil {
			return err
		}
		defer c.Close()
		// The connection was in the backlog when the listener closed:
		// it ends, rather than waiting for a gateway that never comes.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("the connection was neither served nor ended")
		}
		return nil
	})
	// Or the connect itself was refused, or reset as the listener
	// closed under it.
	if err != nil && !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.ECONNRESET) {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(warn.String(), "airlockd not found here") {
		t.Errorf("warning %q does not say why", warn.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
