package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/result"
)

// The pause section's tool: a memory ceiling above the largest case
// (512 MiB) with room for init, the shell and python's own pages.
const (
	pauseTool   = "held"
	pauseLimits = "{memory: 1GiB, pids: 64}"
)

// pauseMiB are the cases: the memory a process of the session holds,
// touched, while it is paused and resumed.
var pauseMiB = []int{64, 512}

// holdProgram allocates n MiB, writes one byte of each page so that
// every page is faulted in and charged, says it is ready, and sleeps.
const holdProgram = `import sys, time
b = bytearray(int(sys.argv[1]) << 20)
b[::4096] = b"\x01" * (len(b) // 4096)
open("/workspace/ready", "w").close()
time.sleep(1e6)
`

// E2B's published figures, cited beside the measured ones (not measured
// here): pausing takes about 4 s per GB of the sandbox's RAM, resuming
// about 1 s (e2b.dev/docs/sandbox/persistence).
const (
	e2bPausePerGB = 4 * time.Second
	e2bResumeText = "1 s"
)

// pauseTarget is the target for each step, p50.
const pauseTarget = 10 * time.Millisecond

// pauseCase is what one memory size measured.
type pauseCase struct {
	mib     int
	charged int64 // bytes charged to the sandbox's memory cgroup, while held
	// pause and resume through the API; freeze and thaw writing the
	// sandbox's freezer file directly, the kernel's floor.
	pause, resume, freeze, thaw series
}

// pauseBench runs a daemon on a private socket and times, through the
// API with the Go client, the pause and the resume of a session whose
// process holds touched memory, 64 MiB and 512 MiB, against the kernel's
// floor for the same step (the sandbox's freezer file written directly,
// until the kernel reports the group frozen or thawed), the two
// interleaved round by round.
func pauseBench(n int) error {
	n = max(n, 1)
	fmt.Printf("\n## Pause and resume (%d rounds per case, interleaved with the kernel floor)\n\n", n)
	c, _, stop, err := startDaemon(fmt.Sprintf("tools:\n  %s:\n    limits: %s\n", pauseTool, pauseLimits))
	if err != nil {
		return err
	}
	defer stop()
	var cases []*pauseCase
	for _, mib := range pauseMiB {
		pc, err := pauseRounds(c, mib, n)
		if err != nil {
			return err
		}
		if pc == nil {
			return nil // skipped, said why
		}
		cases = append(cases, pc)
	}
	v := "v1 (`freezer.state`, until it reads `FROZEN` / `THAWED`)"
	if cgroupV2() {
		v = "v2 (`cgroup.freeze`, until `cgroup.events` has `frozen 1` / `frozen 0`)"
	}
	fmt.Printf("A session of the tool `%s` (`limits: %s`) whose process (`python3`, in the background) holds the memory below, allocated and every page written, and then sleeps. "+
		"Through the API: `POST /v1/sessions/{id}/pause`, then `…/resume`, with the Go client on the daemon's unix socket, each until its answer; the kernel's state checked from the host after each (untimed). "+
		"The floor: the same sandbox's cgroup frozen and thawed by the benchmark itself, cgroup %s, polled without sleeping. "+
		"One API pause and resume and one floor freeze and thaw per round, their order alternating. Charged: the sandbox's memory cgroup's usage, read from the host.\n\n", pauseTool, pauseLimits, v)
	fmt.Println("| step | memory held (charged) | airlock p50 | p99 | kernel floor p50 | p99 | p50 airlock / floor | target p50 |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, pc := range cases {
		for _, r := range []struct {
			step     string
			air, flo *series
		}{{"pause", &pc.pause, &pc.freeze}, {"resume", &pc.resume, &pc.thaw}} {
			ok := "≤ 10 ms: met"
			if r.air.pct(0.5) > pauseTarget {
				ok = "≤ 10 ms: **missed**"
			}
			fmt.Printf("| %s | %d MiB (%.1f MiB) | %s | %s | %s | %s | %.2f× | %s |\n", r.step, pc.mib, float64(pc.charged)/(1<<20),
				ms(r.air.pct(0.5)), ms(r.air.pct(0.99)), ms(r.flo.pct(0.5)), ms(r.flo.pct(0.99)),
				float64(r.air.pct(0.5))/float64(r.flo.pct(0.5)), ok)
		}
	}
	fmt.Printf("\n| E2B's service, published, not measured here | %d MiB | %d MiB |\n| --- | --- | --- |\n", pauseMiB[0], pauseMiB[1])
	fmt.Printf("| pause (4 s per GB of RAM, applied to the memory held) | about %s | about %s |\n", e2bPause(pauseMiB[0]), e2bPause(pauseMiB[1]))
	fmt.Printf("| resume | about %s | about %s |\n", e2bResumeText, e2bResumeText)
	fmt.Println("\nE2B's figures are from its documentation (pausing takes about 4 seconds per 1 GB of RAM, resuming about 1 second), cited for scale, not measured here. " +
		"E2B's pause saves the sandbox's memory and files and frees the machine, while airlock's keeps the frozen processes and their memory in place on the node (still charged, and booked against its capacity): the two do different work.")
	return nil
}

// e2bPause is E2B's published pause rate applied to mib MiB of RAM
// (a GB taken as 1024 MiB: "about" either way).
func e2bPause(mib int) string {
	d := e2bPausePerGB * time.Duration(mib) / 1024
	return fmt.Sprintf("%.2g s", d.Seconds())
}

// pauseRounds opens a session holding mib MiB and times n rounds of
// pause and resume through the API, and freeze and thaw of its cgroup
// directly. It returns nil, having said why, when the host has no
// python3 for the sandbox to run.
func pauseRounds(c *client.Client, mib, n int) (*pauseCase, error) {
	ctx := context.Background()
	s, err := c.CreateSession(ctx, api.SessionRequest{Tool: pauseTool})
	if err != nil {
		return nil, err
	}
	defer c.DeleteSession(ctx, s.ID)
	if r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", "command -v python3"}}); err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
		fmt.Println("Skipped: the sandbox has no python3 (the host's) to hold the memory with.")
		return nil, nil
	}
	// The holder runs in the background, its output to /dev/null so
	// that the exec's answer does not wait for it; the exec ends when it
	// is ready.
	hold := fmt.Sprintf("python3 -c '%s' %d </dev/null >/dev/null 2>&1 &\nwhile [ ! -e /workspace/ready ]; do sleep 0.02; done", holdProgram, mib)
	r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"sh", "-c", hold}})
	if err != nil {
		return nil, err
	}
	if r.Outcome != result.Exited || r.ExitCode != 0 {
		return nil, fmt.Errorf("pause: holding %d MiB: %s %d %s", mib, r.Outcome, r.ExitCode, r.Error)
	}
	cg, err := findSandboxCgroup(s.SandboxID)
	if err != nil {
		return nil, err
	}
	pc := &pauseCase{mib: mib}
	if pc.charged, err = cg.charged(); err != nil {
		return nil, err
	}
	if pc.charged < int64(mib)<<20 {
		return nil, fmt.Errorf("pause: the sandbox's memory cgroup is charged %d bytes, less than the %d MiB held", pc.charged, mib)
	}
	apiRound := func(timed bool) error {
		t0 := time.Now()
		p, err := c.PauseSession(ctx, s.ID)
		t1 := time.Now()
		if err != nil {
			return err
		}
		if frozen, err := cg.frozen(); err != nil || !frozen || p.State != api.SessionPaused {
			return fmt.Errorf("pause: after the API's pause the session is %s, the kernel says frozen %v (%v)", p.State, frozen, err)
		}
		t2 := time.Now()
		q, err := c.ResumeSession(ctx, s.ID, nil)
		t3 := time.Now()
		if err != nil {
			return err
		}
		if frozen, err := cg.frozen(); err != nil || frozen || q.State != api.SessionActive {
			return fmt.Errorf("pause: after the API's resume the session is %s, the kernel says frozen %v (%v)", q.State, frozen, err)
		}
		if timed {
			pc.pause.d = append(pc.pause.d, t1.Sub(t0))
			pc.resume.d = append(pc.resume.d, t3.Sub(t2))
		}
		return nil
	}
	floorRound := func(timed bool) error {
		f, err := cg.freeze()
		if err != nil {
			return err
		}
		t, err := cg.thaw()
		if err != nil {
			return err
		}
		if timed {
			pc.freeze.d = append(pc.freeze.d, f)
			pc.thaw.d = append(pc.thaw.d, t)
		}
		return nil
	}
	// Warm-up, untimed: the first calls pay the client's connection.
	for range 3 {
		if err := apiRound(false); err != nil {
			return nil, err
		}
		if err := floorRound(false); err != nil {
			return nil, err
		}
	}
	for i := range n {
		rounds := []func(bool) error{apiRound, floorRound}
		if i%2 == 1 {
			rounds[0], rounds[1] = rounds[1], rounds[0]
		}
		for _, round := range rounds {
			if err := round(true); err != nil {
				return nil, err
			}
		}
	}
	// Still held, and answering, at the end: nothing was lost to the
	// pauses.
	if r, err := c.Exec(ctx, s.ID, api.ExecRequest{Argv: []string{"test", "-e", "/workspace/ready"}}); err != nil || r.Outcome != result.Exited || r.ExitCode != 0 {
		return nil, fmt.Errorf("pause: the session does not answer after %d pauses: %+v %v", n, r, err)
	}
	after, err := cg.charged()
	if err != nil {
		return nil, err
	}
	if after < int64(mib)<<20 {
		return nil, fmt.Errorf("pause: after %d pauses the sandbox's memory cgroup is charged %d bytes, less than the %d MiB held", n, after, mib)
	}
	return pc, nil
}

// sandboxCgroup is a sandbox's cgroup as the host sees it: the files
// that freeze it and report it frozen, and the one that tells its
// memory's charge.
type sandboxCgroup struct {
	v2 bool
	// freezeFile freezes and thaws (v1 freezer.state, v2 cgroup.freeze);
	// stateFile says whether frozen (v1 freezer.state, v2
	// cgroup.events); memFile is the memory charged (v1
	// memory.usage_in_bytes, v2 memory.current).
	freezeFile, stateFile, memFile string
}

// cgroupV2 reports whether the host mounts the unified hierarchy at
// /sys/fs/cgroup (a v1 or hybrid host mounts a tmpfs there).
func cgroupV2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// findSandboxCgroup finds the cgroup directories named id, the sandbox's,
// below the daemon's cgroup parent in the hierarchies that matter.
func findSandboxCgroup(id string) (*sandboxCgroup, error) {
	if cgroupV2() {
		dir, err := findDir("/sys/fs/cgroup", id)
		if err != nil {
			return nil, err
		}
		return &sandboxCgroup{v2: true, freezeFile: filepath.Join(dir, "cgroup.freeze"),
			stateFile: filepath.Join(dir, "cgroup.events"), memFile: filepath.Join(dir, "memory.current")}, nil
	}
	fr, err := findDir("/sys/fs/cgroup/freezer", id)
	if err != nil {
		return nil, err
	}
	mem, err := findDir("/sys/fs/cgroup/memory", id)
	if err != nil {
		return nil, err
	}
	return &sandboxCgroup{freezeFile: filepath.Join(fr, "freezer.state"), stateFile: filepath.Join(fr, "freezer.state"),
		memFile: filepath.Join(mem, "memory.usage_in_bytes")}, nil
}

var errFound = errors.New("found")

// findDir finds a directory named name below root.
func findDir(root, name string) (string, error) {
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a group gone meanwhile
		}
		if d.IsDir() && d.Name() == name && p != root {
			found = p
			return errFound
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("pause: no cgroup directory %s below %s (%v)", name, root, err)
	}
	return found, nil
}

// charged reads the bytes charged to the sandbox's memory cgroup.
func (g *sandboxCgroup) charged() (int64, error) {
	b, err := os.ReadFile(g.memFile)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// frozen reports whether the kernel holds the group frozen.
func (g *sandboxCgroup) frozen() (bool, error) {
	var buf [256]byte
	return g.readFrozen(buf[:])
}

func (g *sandboxCgroup) readFrozen(buf []byte) (bool, error) {
	fd, err := unix.Open(g.stateFile, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: g.stateFile, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return false, &fs.PathError{Op: "read", Path: g.stateFile, Err: err}
	}
	s := string(buf[:n])
	if g.v2 {
		return strings.Contains(s, "frozen 1\n"), nil
	}
	return strings.TrimSpace(s) == "FROZEN", nil
}

// freeze is the floor of a pause: the freezer file written, then its
// state read again and again, without sleeping, until the kernel
// reports the whole group frozen.
func (g *sandboxCgroup) freeze() (time.Duration, error) {
	on, _ := g.values()
	return g.set(on, true)
}

// thaw is the floor of a resume: the freezer file written, until the
// kernel reports the group thawed.
func (g *sandboxCgroup) thaw() (time.Duration, error) {
	_, off := g.values()
	return g.set(off, false)
}

// values are what the freezer file takes to freeze and to thaw.
func (g *sandboxCgroup) values() (on, off string) {
	if g.v2 {
		return "1", "0"
	}
	return "FROZEN", "THAWED"
}

func (g *sandboxCgroup) set(value string, frozen bool) (time.Duration, error) {
	var buf [256]byte
	start := time.Now()
	fd, err := unix.Open(g.freezeFile, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: g.freezeFile, Err: err}
	}
	_, err = unix.Write(fd, []byte(value))
	unix.Close(fd)
	if err != nil {
		return 0, &fs.PathError{Op: "write", Path: g.freezeFile, Err: err}
	}
	for {
		ok, err := g.readFrozen(buf[:])
		if err != nil {
			return 0, err
		}
		if ok == frozen {
			return time.Since(start), nil
		}
		if time.Since(start) > 5*time.Second {
			err := fmt.Errorf("pause: %s: not %s after 5 s", g.freezeFile, value)
			if frozen {
				// Not left half frozen: the session goes on running.
				_, off := g.values()
				_, terr := g.set(off, false)
				err = errors.Join(err, terr)
			}
			return 0, err
		}
	}
}
