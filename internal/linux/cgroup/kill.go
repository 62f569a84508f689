package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// freezeWait bounds how long one kill round waits for the freezer to
	// report FROZEN. A task in uninterruptible sleep keeps a group in
	// FREEZING for as long as it sleeps; the round then kills what it can
	// see anyway and a later round catches the rest.
	freezeWait = 100 * time.Millisecond
	// rekillInterval is how long Kill waits for killed processes to
	// vanish before it runs another full round.
	rekillInterval = 50 * time.Millisecond
)

// Kill kills every process in the group (and in groups nested in it) and
// waits, bounded by ctx, until the group is empty. Stopped processes and
// processes that ignore or block signals do not survive: everything gets
// SIGKILL.
//
// On v2 with cgroup.kill (kernel >= 5.14) one write kills the whole
// subtree, and the kernel makes sure no fork escapes it. Otherwise Kill
// freezes the group, so nothing can fork while the pids are listed and
// signalled, sends SIGKILL to each, thaws (frozen tasks die only once
// thawed), and repeats until the group is empty.
//
// On v1 this is slow by design: the kernel blocks each write to
// freezer.state for milliseconds (about 2-4ms each for freezing and
// thawing on a small VM), so a teardown should check Populated first and
// call Kill only when something is left.
//
// The wait for the freezer is bounded (100ms per round, and ctx): a task
// in uninterruptible sleep can keep a group FREEZING indefinitely, and an
// unbounded wait for FROZEN would make Kill ignore ctx.
func (g *Group) Kill(ctx context.Context) error {
	if g.p.version == V2 && g.p.hasKill {
		return g.killV2(ctx)
	}
	return g.killFrozen(ctx)
}

func (g *Group) killV2(ctx context.Context) error {
	if err := writeFile(filepath.Join(g.dirs[0], "cgroup.kill"), "1"); err != nil {
		if isNotExist(err) {
			return nil // the group is gone, and so is everything in it
		}
		return fmt.Errorf("cgroup: kill group %s: %w", g.id, err)
	}
	var b backoff
	for {
		pop, err := g.Populated()
		if err != nil {
			if gone(err) {
				return nil
			}
			return err
		}
		if !pop {
			return nil
		}
		if err := b.wait(ctx); err != nil {
			return fmt.Errorf("cgroup: group %s still has processes after cgroup.kill: %w", g.id, err)
		}
	}
}

// gone reports whether err says the group's directory no longer exists:
// ENOENT for a path, ENODEV for a kept descriptor of a removed group.
func gone(err error) bool {
	return isNotExist(err) || errors.Is(err, unix.ENODEV)
}

func (g *Group) procs() ([]int, error) {
	if g.p.version == V1 {
		return g.procsV1()
	}
	return g.procsV2()
}

func (g *Group) killFrozen(ctx context.Context) error {
	for round := 0; ; round++ {
		empty, err := g.empty()
		if err != nil || empty {
			return err
		}
		// Even with ctx already done, one round runs: a caller out of
		// time still wants the processes dead.
		if round > 0 && ctx.Err() != nil {
			return fmt.Errorf("cgroup: processes of group %s still present after SIGKILL: %w", g.id, ctx.Err())
		}
		if err := g.freezeKillThaw(ctx); err != nil {
			return err
		}
		// Wait for the killed processes to exit, with the cheap direct
		// check; empty() confirms with the full listing. Past
		// rekillInterval another round runs, in case a freeze timed out
		// and something forked meanwhile.
		deadline := time.Now().Add(rekillInterval)
		var b backoff
		for time.Now().Before(deadline) {
			pop, err := g.Populated()
			if err != nil && !gone(err) {
				return err
			}
			if err != nil || !pop {
				break
			}
			if err := b.wait(ctx); err != nil {
				return fmt.Errorf("cgroup: processes of group %s still present after SIGKILL: %w", g.id, err)
			}
		}
	}
}

// empty reports whether no process is left in the group or in groups
// nested in it. Populated answers that on v2, and a positive answer on v1,
// cheaply; an empty v1 group is confirmed by the recursive listing, since
// v1 has no recursive populated flag.
func (g *Group) empty() (bool, error) {
	pop, err := g.Populated()
	if err != nil && !gone(err) {
		return false, err
	}
	if err == nil && pop {
		return false, nil
	}
	if err == nil && g.p.version == V2 {
		return true, nil
	}
	pids, err := g.procs()
	return len(pids) == 0, err
}

// freezeKillThaw runs one round: freeze, SIGKILL everything listed, thaw.
// The thaw happens whatever else failed, since a group left frozen keeps
// its killed processes alive.
func (g *Group) freezeKillThaw(ctx context.Context) error {
	frozen, err := g.freeze(ctx)
	if err != nil {
		return errors.Join(err, g.thaw(frozen))
	}
	pids, err := g.procs()
	errs := []error{err}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			errs = append(errs, fmt.Errorf("cgroup: group %s: kill %d: %w", g.id, pid, err))
		}
	}
	errs = append(errs, g.thaw(frozen))
	return errors.Join(errs...)
}

// freezerFile returns the file that freezes the group and the values that
// freeze and thaw it.
func (g *Group) freezerFile() (file, freeze, thaw string) {
	if g.p.version == V1 {
		return filepath.Join(g.dirs[g.p.v1.idx[ctrlFreezer]], "freezer.state"), "FROZEN", "THAWED"
	}
	return filepath.Join(g.dirs[0], "cgroup.freeze"), "1", "0"
}

// freeze asks the kernel to freeze the group and waits, at most
// freezeWait, for it to be frozen. It reports whether the freeze was
// requested (and so needs a thaw). A group whose freezer directory is gone
// is not frozen and not an error: Kill then signals without freezing.
func (g *Group) freeze(ctx context.Context) (bool, error) {
	file, on, _ := g.freezerFile()
	if err := writeFile(file, on); err != nil {
		if isNotExist(err) {
			return false, nil
		}
		return false, fmt.Errorf("cgroup: freeze group %s: %w", g.id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	var b backoff
	for {
		ok, err := g.isFrozen()
		if err != nil || ok {
			return true, err
		}
		if b.wait(ctx) != nil {
			return true, nil // not frozen in time: kill what is visible
		}
	}
}

func (g *Group) isFrozen() (bool, error) {
	var buf [128]byte
	if g.p.version == V1 {
		file, _, _ := g.freezerFile()
		data, err := readFile(file, buf[:])
		if err != nil {
			return false, fmt.Errorf("cgroup: group %s: %w", g.id, err)
		}
		return string(data) == "FROZEN\n" || string(data) == "FROZEN", nil
	}
	data, err := readFile(filepath.Join(g.dirs[0], "cgroup.events"), buf[:])
	if err != nil {
		return false, fmt.Errorf("cgroup: group %s: %w", g.id, err)
	}
	n, err := parseValue(data, "frozen")
	return n == 1, err
}

func (g *Group) thaw(frozen bool) error {
	if !frozen {
		return nil
	}
	file, _, off := g.freezerFile()
	if err := writeFile(file, off); err != nil && !isNotExist(err) {
		return fmt.Errorf("cgroup: thaw group %s: %w", g.id, err)
	}
	return nil
}

// Delete removes the group's directories in every hierarchy and releases
// the kept descriptors. Removal fails while the kernel still counts a task
// in the group (one that is still exiting, typically), so it is retried
// until ctx ends. Deleting a group that is already gone is not an error.
// The processes must be gone: Delete does not kill (see Kill).
func (g *Group) Delete(ctx context.Context) error {
	closeErr := g.Close()
	// Fast path: a plain rmdir of each directory, which is all a sandbox
	// group without nested groups needs. The kernel refuses to remove a
	// group that still has a task, so this can never drop a live process;
	// whatever it cannot remove is retried below, nested groups first.
	if g.rmdirAll() {
		return closeErr
	}
	var b backoff
	for {
		err := g.removeTrees()
		if err == nil {
			return closeErr
		}
		if b.wait(ctx) != nil {
			return errors.Join(fmt.Errorf("cgroup: delete group %s: %w", g.id, err), closeErr)
		}
	}
}

// TryDelete removes the group's directories with one rmdir each and
// reports whether all are gone; it does not retry, kill or wait. The kernel
// refuses to remove a group with a task left, so a false answer is the
// caller's cue for Kill and Delete, and a true one needs no check of its
// own that the group was empty. The kept descriptors are released either
// way (a later read reopens what it needs).
func (g *Group) TryDelete() bool {
	_ = g.Close()
	return g.rmdirAll()
}

// rmdirAll removes the group's directories, deepest hierarchy order
// irrelevant (they are siblings), and reports whether all are gone.
func (g *Group) rmdirAll() bool {
	ok := true
	for _, d := range g.dirs {
		if d == "" {
			continue
		}
		if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
			ok = false
		}
	}
	return ok
}

// Signal sends SIGKILL to every process in the group at once and does not
// wait: on v2 with cgroup.kill, the kernel's whole-subtree kill; else one
// SIGKILL to each process listed (a process forked meanwhile is Kill's to
// catch, which a teardown runs when the group is not empty). It is for
// sandboxes whose processes have no common ancestor whose death ends them
// all (gVisor's runsc, sentry and gofer).
func (g *Group) Signal() error {
	if g.p.version == V2 && g.p.hasKill {
		if err := writeFile(filepath.Join(g.dirs[0], "cgroup.kill"), "1"); err != nil && !isNotExist(err) {
			return fmt.Errorf("cgroup: kill group %s: %w", g.id, err)
		}
		return nil
	}
	pids, err := g.procs()
	if err != nil {
		if gone(err) {
			return nil
		}
		return err
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	return nil
}
