package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/pool"
	"github.com/airlockhq/airlock/sandbox"
)

// Admission: what one caller, and all callers together, may hold of the
// node. The node's budget (how many sandboxes, and the sums of their
// memory and pids ceilings) is the runtime's (sandbox.Budget), so every
// sandbox counts, warm in a pool or not. On top of it the daemon bounds
// the sandboxes held for a while (sessions and MCP servers: MaxSessions)
// and each token's calls in flight plus what it holds (its concurrency).

// AtCapacity is the refusal of a sandbox the node's budget has no room
// for (err matches sandbox.ErrCapacity, and so does the refusal).
func AtCapacity(err error) error {
	why := err.Error()
	if _, after, ok := strings.Cut(why, sandbox.ErrCapacity.Error()+": "); ok {
		why = after
	}
	return &Refusal{Kind: sandbox.ErrCapacity, RetryAfter: 1,
		Msg: "the node is at capacity: " + why + "; try again shortly"}
}

// holds counts the sandboxes held for a while and each token's share.
type holds struct {
	mu       sync.Mutex // guards sessions and tokens
	sessions int
	tokens   map[string]int
}

// hold takes one of c's token's concurrency and, for a session or an MCP
// server (held), one of the daemon's MaxSessions. release gives back what
// it took, once. The check and the count are one step, so concurrent
// calls can never pass the bounds together.
func (n *Node) hold(c *Caller, held bool) (release func(), err error) {
	// Every run, session and MCP server passes here: one with no caller
	// is refused, not run as the local socket's (which would bound it by
	// no token and open every tool to it).
	if c == nil {
		return nil, ErrNoCaller
	}
	h := &n.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	tok := c.Token
	if held && h.sessions >= n.opts.MaxSessions {
		n.metrics.refusals.Inc("sessions")
		return nil, &Refusal{Kind: errdefs.ErrUnavailable, RetryAfter: 5,
			Msg: fmt.Sprintf("%d sessions and MCP servers are open, the most this daemon allows; end one first", n.opts.MaxSessions)}
	}
	if tok != nil && tok.Concurrency > 0 && h.tokens[tok.Name] >= tok.Concurrency {
		n.metrics.refusals.Inc("token_concurrency")
		return nil, &Refusal{Kind: ErrTooMany, RetryAfter: 1,
			Msg: fmt.Sprintf("token %s has %d calls in flight and sessions open, the most its concurrency allows", tok.Name, tok.Concurrency)}
	}
	if held {
		h.sessions++
	}
	if tok != nil {
		if h.tokens == nil {
			h.tokens = map[string]int{}
		}
		h.tokens[tok.Name]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if held {
				h.sessions--
			}
			if tok != nil {
				h.tokens[tok.Name]--
			}
		})
	}, nil
}

// claim claims a sandbox of tool from its pool (started, for a caller that
// runs a command at once). When the node is at capacity it makes room by
// destroying a ready sandbox of another pool, and tries again, a few
// times: warm pools are the node's spare capacity, and work comes first.
func (n *Node) claim(ctx context.Context, tool string, started bool) (*sandbox.Sandbox, bool, error) {
	return n.claimFrom(ctx, tool, n.Pool(tool), started)
}

// maxReplaced bounds how often a claim follows its tool's pool to the one a
// reload put in its place.
const maxReplaced = 3

// claimFrom is claim from p, the tool's pool as its caller found it. A
// reload that replaces the pool in between closes p: the claim then goes
// to the pool there is now, instead of failing as if the node were
// stopping; one that removes the tool refuses it as not found.
func (n *Node) claimFrom(ctx context.Context, tool string, p *pool.Pool, started bool) (*sandbox.Sandbox, bool, error) {
	start := time.Now()
	for tries, replaced := 0, 0; ; {
		if p == nil {
			return nil, false, fmt.Errorf("%w: %q", ErrToolRemoved, tool)
		}
		var sb *sandbox.Sandbox
		var warm bool
		var err error
		if started {
			sb, warm, err = p.ClaimStarted(ctx)
		} else {
			sb, warm, err = p.Claim(ctx)
		}
		if err == nil {
			how := "cold"
			if warm {
				how = "warm"
			}
			n.metrics.claims.Observe(time.Since(start).Seconds(), n.metrics.tool(tool), how)
			return sb, warm, nil
		}
		if errors.Is(err, pool.ErrClosed) {
			// The node's stop closes its pools and leaves them in place.
			if q := n.Pool(tool); q != p && replaced < maxReplaced {
				p = q
				replaced++
				continue
			}
			return nil, false, err
		}
		if !errors.Is(err, sandbox.ErrCapacity) {
			return nil, false, err
		}
		if tries == 3 || !n.evictFor(ctx, tool) {
			n.metrics.refusals.Inc("capacity")
			return nil, false, err
		}
		tries++
	}
}

// evictFor destroys one ready sandbox of the pool (other than tool's) that
// holds the most, and reports whether there was one. With none ready but
// pools' refills making some, it waits, within buildWait, for those builds
// to end and looks once more: a build holds its share of the capacity
// already, and once ready it is evicted, so that the claim, not the
// refill, gets the capacity. A build refused for capacity ends at once.
func (n *Node) evictFor(ctx context.Context, tool string) bool {
	type build struct {
		p     *pool.Pool
		ended uint64
	}
	for waited := false; ; waited = true {
		var most *pool.Pool
		var pending []build
		held := 0
		for name, p := range n.ts.Load().pools {
			if name == tool {
				continue
			}
			if idle := p.Stats().Idle; idle > held {
				most, held = p, idle
			}
			if on, ended := p.Building(); on {
				pending = append(pending, build{p, ended})
			}
		}
		if most != nil && most.Evict() {
			return true
		}
		if waited || len(pending) == 0 {
			return false
		}
		deadline := time.Now().Add(buildWait)
		for _, b := range pending {
			for {
				if _, ended := b.p.Building(); ended != b.ended {
					break
				}
				if time.Now().After(deadline) {
					return false
				}
				select {
				case <-ctx.Done():
					return false
				case <-time.After(2 * time.Millisecond):
				}
			}
		}
	}
}

// buildWait bounds how long a claim refused for capacity waits for the
// sandboxes pools are making, to evict one once ready.
const buildWait = 5 * time.Second

// budget turns the configured capacity into the runtime's budget, taking
// defaults from the host: memory ceilings may add up to 80% of the host's
// memory (the rest is the host's own, the daemon's and the page cache's),
// pids ceilings to half the host's pid space (every sandbox's tasks take
// host pids), and 1,024 sandboxes. Where the cgroups above the sandboxes
// hold them to less (ceil: a container's limits, a service's MemoryMax=
// and TasksMax=), the defaults are shares of that instead (80% of the
// memory, three quarters of the pids: the rest is the daemon's), and a
// configured capacity over it is an error.
func budget(c config.Capacity, ceil sandbox.ParentCeiling) (sandbox.Budget, error) {
	b := sandbox.Budget{Sandboxes: c.Sandboxes, Memory: c.Memory, Pids: c.Pids}
	if b.Sandboxes == 0 {
		b.Sandboxes = 1024
	}
	if b.Memory == 0 {
		total, err := memTotal()
		if err != nil {
			return b, err
		}
		if ceil.Memory > 0 {
			total = min(total, ceil.Memory)
		}
		share := int64(c.MemoryShare)
		if share == 0 {
			share = 80
		}
		b.Memory = total / 100 * share
	} else if ceil.Memory > 0 && b.Memory > ceil.Memory {
		return b, fmt.Errorf("memory %s is over the memory limit of %s of cgroup %s, which holds every sandbox: the kernel would take it back by OOM-killing below that group, the daemon included",
			units.FormatSize(b.Memory), units.FormatSize(ceil.Memory), ceil.MemoryAt)
	}
	if b.Pids == 0 {
		pidMax, err := readInt("/proc/sys/kernel/pid_max")
		if err != nil {
			return b, err
		}
		b.Pids = pidMax / 2
		if ceil.Pids > 0 {
			b.Pids = min(b.Pids, max(ceil.Pids*3/4, 1))
		}
	} else if ceil.Pids > 0 && b.Pids > ceil.Pids {
		return b, fmt.Errorf("pids %d is over the pids limit of %d of cgroup %s, which holds every sandbox", b.Pids, ceil.Pids, ceil.PidsAt)
	}
	return b, nil
}

// Capacity is the budget a daemon would have: the configured capacity
// over the defaults, under the cgroups above cgroupParent (the sandboxes'
// parent; "" is the default). airlock config check shows it.
func Capacity(c config.Capacity, cgroupParent string) (sandbox.Budget, sandbox.ParentCeiling, error) {
	ceil, err := sandbox.ReadParentCeiling(cgroupParent)
	if err != nil {
		return sandbox.Budget{}, ceil, err
	}
	b, err := budget(c, ceil)
	return b, ceil, err
}

// memTotal is the host's memory (MemTotal in /proc/meminfo), in bytes.
func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}
