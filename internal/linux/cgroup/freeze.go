package cgroup

import (
	"context"
	"errors"
	"fmt"
)

// Freeze stops every process of the group (and of groups nested in it)
// where it stands, for a pause: a frozen process runs no code and takes no
// CPU, keeps its memory charged to the group, and cannot be scheduled
// until Thaw. Freeze waits, bounded by ctx, until the kernel reports the
// whole group frozen; a group that is not frozen in time (a task in
// uninterruptible sleep keeps it FREEZING) is thawed again and the error
// says so, so a failed pause never leaves a group half stopped.
//
// Freezing a frozen group is not an error. A frozen group can still be
// killed: Kill thaws what it killed.
func (g *Group) Freeze(ctx context.Context) error {
	file, on, _ := g.freezerFile()
	if err := writeFile(file, on); err != nil {
		return fmt.Errorf("cgroup: freeze group %s: %w", g.id, err)
	}
	var b backoff
	for {
		ok, err := g.isFrozen()
		if err == nil && ok {
			return nil
		}
		if err == nil {
			err = b.wait(ctx)
		}
		if err != nil {
			return errors.Join(fmt.Errorf("cgroup: group %s did not freeze: %w", g.id, err), g.thaw(true))
		}
	}
}

// Thaw lets the processes of a group Freeze stopped run again. Thawing a
// group that is not frozen is not an error.
func (g *Group) Thaw() error {
	file, _, off := g.freezerFile()
	if err := writeFile(file, off); err != nil {
		return fmt.Errorf("cgroup: thaw group %s: %w", g.id, err)
	}
	return nil
}

// Frozen reports whether the kernel holds the group frozen now.
func (g *Group) Frozen() (bool, error) { return g.isFrozen() }
