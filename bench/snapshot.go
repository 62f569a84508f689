package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// The snapshot section's tool: a warm pool, as in production, and
// ceilings with room for the largest case (64 MiB of files, on the
// sandbox's disk tmpfs, whose pages are charged to its memory).
const (
	snapTool = "snap"
	// snapCold is the same tool with no warm pool.
	snapCold   = "snapcold"
	snapWarm   = 4
	snapLimits = "{disk: 256MiB, memory: 512MiB, pids: 64}"
	// snapForks is the fork's count, and the fresh creates beside it.
	snapForks = 4
)

// snapTarget is the target: a create from a snapshot at most
// this many times a fresh create of the same tool, p50.
const snapTarget = 1.5

// snapCase is one workspace a session holds: how it is made, and what
// was measured of it.
type snapCase struct {
	name string
	// fill makes the files in the session's /workspace.
	fill string
	// files and bytes are what its snapshot held (from the API).
	files int
	bytes int64
	// source is the session holding the files; snap a snapshot of it
	// that the creates are made from.
	source, snap string
	// capture is Snapshot's time; restore and fresh a create from snap
	// and a fresh create, each until the answer (…Create) and until the
	// first command's (…First).
	capture                                              series
	restoreCreate, restoreFirst, freshCreate, freshFirst series
	// coldCreate and coldFirst are a fresh create of a tool with no
	// warm pool: a sandbox made from the base image on the spot.
	coldCreate, coldFirst series
	// layered is from the snapshot's call until the node holds its files
	// unpacked (api.Snapshot.Layered), done in the background.
	layered series
	// copied says the creates from the snapshot copied its files (it
	// was never layered: a kernel before 6.6).
	copied bool
}

// snapCases: a few hundred small files, 1 MiB in all; and a few big
// ones, 64 MiB. Random bytes, so that nothing is smaller than it says.
var snapCases = []*snapCase{
	{name: "1 MiB (256 files of 4 KiB in 8 directories)",
		fill: `cd /workspace && for d in 0 1 2 3 4 5 6 7; do mkdir -p src/d$d; for f in $(seq 0 31); do head -c 4096 /dev/urandom > src/d$d/f$f; done; done`},
	{name: "64 MiB (4 files of 16 MiB)",
		fill: `cd /workspace && for f in 0 1 2 3; do head -c 16777216 /dev/urandom > big$f; done`},
}

// snapshotBench runs a daemon on a private socket and times, through
// the API with the Go client: the snapshot of a session holding 1 MiB
// and 64 MiB of files; a create from such a snapshot against a fresh
// create of the same tool (both claiming a warm sandbox), each through
// its first command; and a fork into 4 against 4 fresh creates one
// after another. The cases and sides are interleaved round by round.
func snapshotBench(n int) error {
	n = max(n, 1)
	fmt.Printf("\n## Snapshots and forks (%d rounds, interleaved, Go client on the unix socket)\n\n", n)
	c, _, stop, err := startDaemon(fmt.Sprintf("tools:\n  %s:\n    pool: {warm: %d}\n    limits: %s\n  %s:\n    pool: {warm: 0}\n    limits: %s\n", snapTool, snapWarm, snapLimits, snapCold, snapLimits))
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	for _, sc := range snapCases {
		s, err := c.CreateSession(ctx, api.SessionRequest{Tool: snapTool})
		if err != nil {
			return err
		}
		sc.source = s.ID
		defer c.DeleteSession(ctx, s.ID)
		if err := execOK(c, s.ID, "sh", "-c", sc.fill); err != nil {
			return fmt.Errorf("snapshot: filling %s: %w", sc.name, err)
		}
	}
	hits0, misses0, err := poolCounts(c)
	if err != nil {
		return err
	}
	// 1. The snapshot of each, deleted after (untimed); 3 untimed first.
	for i := range n + 3 {
		for _, sc := range snapCases {
			snapPoolReady(c)
			t0 := time.Now()
			m, err := c.Snapshot(ctx, sc.source, "")
			d := time.Since(t0)
			if err != nil {
				return err
			}
			sc.files, sc.bytes = m.Files, m.Size
			// Its unpacking is let end before the next round, so that
			// no capture is timed beside another's.
			layered := waitLayered(c, m.ID)
			dl := time.Since(t0)
			if err := c.DeleteSnapshot(ctx, m.ID); err != nil {
				return err
			}
			if i >= 3 {
				sc.capture.d = append(sc.capture.d, d)
				if layered {
					sc.layered.d = append(sc.layered.d, dl)
				}
			}
		}
	}
	// 2. Create from a snapshot, and fresh, each through `true`; the
	// restore's files checked in the untimed rounds.
	for i, sc := range snapCases {
		m, err := c.Snapshot(ctx, sc.source, fmt.Sprintf("bench-%d", i))
		if err != nil {
			return err
		}
		sc.snap = m.ID
		defer c.DeleteSnapshot(ctx, m.ID)
		sc.copied = !waitLayered(c, m.ID)
	}
	for i := range n + 3 {
		for _, sc := range snapCases {
			sides := []func() error{
				func() error { return createRound(c, sc, true, i >= 3) },
				func() error { return createRound(c, sc, false, i >= 3) },
				func() error { return coldRound(c, sc, i >= 3) },
			}
			if i%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, side := range sides {
				if err := side(); err != nil {
					return err
				}
			}
		}
	}
	hits1, misses1, err := poolCounts(c)
	if err != nil {
		return err
	}
	// 3. A fork of the 1 MiB session into 4, and 4 fresh creates one
	// after another.
	fork, four := series{name: fmt.Sprintf("fork into %d (one `Fork` call, count %d)", snapForks, snapForks)},
		series{name: fmt.Sprintf("%d fresh creates, one after another", snapForks)}
	for i := range n + 3 {
		sides := []func() error{
			func() error { return forkRound(c, snapCases[0].source, &fork, i >= 3) },
			func() error { return freshRound(c, &four, i >= 3) },
		}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return err
			}
		}
	}
	hits2, misses2, err := poolCounts(c)
	if err != nil {
		return err
	}
	printSnapshots(n, fork, four, [3][2]int64{{hits0, misses0}, {hits1, misses1}, {hits2, misses2}})
	return nil
}

// printSnapshots prints the section's tables.
func printSnapshots(n int, fork, four series, pool [3][2]int64) {
	fmt.Printf("A session of the tool `%s` (`pool: {warm: %d}`, `limits: %s`) holding the files below in /workspace, made by a command. "+
		"Before every timed call the pool is let refill to %d ready sandboxes, so every claim is served warm; "+
		"the order of the two sides alternates round by round, the cases interleaved; 3 untimed rounds first.\n\n", snapTool, snapWarm, snapLimits, snapWarm)
	fmt.Print("Snapshot: `POST /v1/sessions/{id}/snapshots` (`Client.Snapshot`), until its answer (the session frozen, its /workspace and /tmp archived to the store, fsynced); " +
		"then, untimed by the caller, the node unpacks the archive in the background (the lower layer sandboxes start from): *until layered* is from the call until `GetSnapshot` says `layered` (polled every millisecond). Each snapshot deleted after, untimed.\n\n")
	fmt.Println("| session holding | files in the snapshot | snapshot p50 | p99 | until layered p50 | p99 |\n| --- | --- | --- | --- | --- | --- |")
	for _, sc := range snapCases {
		lp50, lp99 := "never (copied)", "–"
		if len(sc.layered.d) > 0 {
			lp50, lp99 = ms(sc.layered.pct(0.5)), ms(sc.layered.pct(0.99))
		}
		fmt.Printf("| %s | %d entries, %.2f MiB | %s | %s | %s | %s |\n", sc.name, sc.files, float64(sc.bytes)/(1<<20), ms(sc.capture.pct(0.5)), ms(sc.capture.pct(0.99)), lp50, lp99)
	}
	warm := "every claim warm"
	if d := pool[1][1] - pool[0][1]; d > 0 {
		warm = fmt.Sprintf("**%d of %d claims missed the pool**", d, pool[1][0]-pool[0][0]+d)
	}
	how := "a sandbox made on the spot with the snapshot's files as the lower layer of its /workspace and /tmp, nothing copied"
	for _, sc := range snapCases {
		if sc.copied {
			how = "**the snapshot was never layered here: a warm sandbox claimed and filled with a copy of the files**"
		}
	}
	fmt.Printf("\nCreate: `POST /v1/sessions` (`CreateSession`) with `snapshot` (%s) against one with only `tool` (a warm sandbox claimed), "+
		"each timed until its answer, and until the answer of a first command `true` (`Exec`) after it; the session deleted after, untimed. Pool: %s (hits %d, misses %d in these rounds).\n\n",
		how, warm, pool[1][0]-pool[0][0], pool[1][1]-pool[0][1])
	fmt.Printf("Beside them, a fresh create of the tool `%s`, the same but with no warm pool: a sandbox made on the spot from the base image, as a create from a snapshot is. The target (≤ %.1f×) is judged against it; the warm claim, which does no work the caller waits for, is shown too.\n\n", snapCold, snapTarget)
	fmt.Println("| files | step | from the snapshot p50 | p99 | fresh cold p50 | p99 | fresh warm p50 | p99 | p50 / cold | p50 / warm | target ≤ 1.5× of a cold create |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, sc := range snapCases {
		for _, r := range []struct {
			step             string
			snap, frsh, cold *series
		}{{"create", &sc.restoreCreate, &sc.freshCreate, &sc.coldCreate}, {"create → first `true`", &sc.restoreFirst, &sc.freshFirst, &sc.coldFirst}} {
			ratio := float64(r.snap.pct(0.5)) / float64(r.cold.pct(0.5))
			warmRatio := float64(r.snap.pct(0.5)) / float64(r.frsh.pct(0.5))
			ok := "met"
			if ratio > snapTarget {
				ok = "**missed**"
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %.2f× | %.2f× | %s |\n", strings.Fields(sc.name)[0]+" MiB", r.step,
				ms(r.snap.pct(0.5)), ms(r.snap.pct(0.99)), ms(r.cold.pct(0.5)), ms(r.cold.pct(0.99)), ms(r.frsh.pct(0.5)), ms(r.frsh.pct(0.99)), ratio, warmRatio, ok)
		}
	}
	fmt.Printf("\nFork: `POST /v1/sessions/{id}/fork` with count %d of the 1 MiB session (`Client.Fork`), until its answer (a capture, then %d warm sandboxes claimed and filled with a copy, up to 8 at once: a fork does not wait for the layer), every fork checked made; "+
		"beside it %d `CreateSession` of the tool one after another, until the last answer. The sessions deleted after, untimed. Pool: hits %d, misses %d in these rounds.\n\n",
		snapForks, snapForks, snapForks, pool[2][0]-pool[1][0], pool[2][1]-pool[1][1])
	fmt.Println("| sessions | p50 | p99 | p50 / fresh creates |\n| --- | --- | --- | --- |")
	for _, s := range []*series{&fork, &four} {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", s.name, ms(s.pct(0.5)), ms(s.pct(0.99)), float64(s.pct(0.5))/float64(four.pct(0.5)))
	}
	fmt.Println()
}

// coldRound opens a session of the tool with no warm pool (a sandbox
// made on the spot from the base image), runs `true`, ends it; timed, it
// adds the times to sc's cold series.
func coldRound(c *client.Client, sc *snapCase, timed bool) error {
	ctx := context.Background()
	t0 := time.Now()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: snapCold})
	t1 := time.Now()
	if err != nil {
		return err
	}
	defer c.DeleteSession(ctx, s.ID)
	if err := execOK(c, s.ID, "true"); err != nil {
		return err
	}
	if timed {
		sc.coldCreate.d, sc.coldFirst.d = append(sc.coldCreate.d, t1.Sub(t0)), append(sc.coldFirst.d, time.Since(t0))
	}
	return nil
}

// createRound opens a session, from sc's snapshot or fresh, runs `true`
// in it and ends it; timed, it adds the times to sc's series. A session
// from the snapshot is checked to hold its files in the untimed rounds.
func createRound(c *client.Client, sc *snapCase, fromSnap, timed bool) error {
	ctx := context.Background()
	req := api.SessionRequest{Tool: snapTool}
	if fromSnap {
		req = api.SessionRequest{Snapshot: sc.snap}
	}
	snapPoolReady(c)
	t0 := time.Now()
	s, err := c.CreateSession(ctx, req)
	t1 := time.Now()
	if err != nil {
		return err
	}
	defer c.DeleteSession(ctx, s.ID)
	if err := execOK(c, s.ID, "true"); err != nil {
		return err
	}
	t2 := time.Now()
	if fromSnap && !timed {
		// As many regular files, as many bytes, as the source holds.
		count := `find /workspace -type f | wc -l; find /workspace -type f -exec cat {} + | wc -c`
		var got, want string
		for _, id := range []string{s.ID, sc.source} {
			r, err := c.Exec(ctx, id, api.ExecRequest{Argv: []string{"sh", "-c", count}})
			if err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
				return fmt.Errorf("snapshot: counting files: %+v %v", r, err)
			}
			got, want = want, string(r.Stdout)
		}
		if got != want || got == "" {
			return fmt.Errorf("snapshot: a session from the snapshot of %s holds %q (files, bytes), its source %q", sc.name, got, want)
		}
	}
	if timed {
		if fromSnap {
			sc.restoreCreate.d, sc.restoreFirst.d = append(sc.restoreCreate.d, t1.Sub(t0)), append(sc.restoreFirst.d, t2.Sub(t0))
		} else {
			sc.freshCreate.d, sc.freshFirst.d = append(sc.freshCreate.d, t1.Sub(t0)), append(sc.freshFirst.d, t2.Sub(t0))
		}
	}
	return nil
}

// forkRound forks source into snapForks sessions, timed until the
// answer, checks each was made, and ends them.
func forkRound(c *client.Client, source string, s *series, timed bool) error {
	ctx := context.Background()
	snapPoolReady(c)
	t0 := time.Now()
	fs, err := c.Fork(ctx, source, api.ForkRequest{Count: snapForks})
	d := time.Since(t0)
	if err != nil {
		return err
	}
	var failed error
	for _, f := range fs {
		if f.Session != nil {
			defer c.DeleteSession(ctx, f.Session.ID)
		} else if failed == nil {
			failed = fmt.Errorf("snapshot: a fork was not made: %+v", f.Error)
		}
	}
	if failed != nil {
		return failed
	}
	if len(fs) != snapForks {
		return fmt.Errorf("snapshot: a fork of %d made %d", snapForks, len(fs))
	}
	if timed {
		s.d = append(s.d, d)
	}
	return nil
}

// freshRound opens snapForks sessions of the tool one after another,
// timed until the last answer, and ends them.
func freshRound(c *client.Client, s *series, timed bool) error {
	ctx := context.Background()
	snapPoolReady(c)
	t0 := time.Now()
	for range snapForks {
		f, err := c.CreateSession(ctx, api.SessionRequest{Tool: snapTool})
		if err != nil {
			return err
		}
		defer c.DeleteSession(ctx, f.ID)
	}
	if timed {
		s.d = append(s.d, time.Since(t0))
	}
	return nil
}

// execOK runs argv in session id and wants it to exit 0.
func execOK(c *client.Client, id string, argv ...string) error {
	r, err := c.Exec(context.Background(), id, api.ExecRequest{Argv: argv})
	if err != nil {
		return err
	}
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		return fmt.Errorf("%s: %s %d %s %s", argv[0], r.Outcome, r.ExitCode, r.Error, r.Stderr)
	}
	return nil
}

// waitLayered waits until snapshot id is layered (its files unpacked in
// the background), for 30 s at most; false if it never was.
func waitLayered(c *client.Client, id string) bool {
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(time.Millisecond) {
		m, err := c.GetSnapshot(context.Background(), id)
		if err != nil {
			return false
		}
		if m.Layered {
			return true
		}
	}
	return false
}

// snapPoolReady lets the tool's pool refill to its target.
func snapPoolReady(c *client.Client) {
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		ps, err := c.Pools(context.Background())
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.Name == snapTool && p.Idle >= p.Warm {
				return
			}
		}
	}
}

// poolCounts are the tool's pool's hits and misses so far.
func poolCounts(c *client.Client) (hits, misses int64, err error) {
	ps, err := c.Pools(context.Background())
	if err != nil {
		return 0, 0, err
	}
	for _, p := range ps {
		if p.Name == snapTool {
			return p.Hits, p.Misses, nil
		}
	}
	return 0, 0, fmt.Errorf("snapshot: the daemon has no pool for %s", snapTool)
}
