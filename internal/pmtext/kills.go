package pmtext

import "github.com/airlockhq/airlock/result"

// Kills are the out-of-memory kills a reader of the kernel's log has
// seen, by memory cgroup: at most MaxKills, the oldest dropped first.
type Kills struct {
	kills []Kill
}

// Kill is one kill the kernel's log recorded.
type Kill struct {
	// Group is the last element of the killed task's memory cgroup.
	Group string
	// Process is the process killed: its PID always, its name and
	// resident memory once Named.
	Process result.Process
	// Named: the kill's "Killed process" record, which the kernel writes
	// after the counter a breach is seen by, has been read.
	Named bool
}

// MaxKills bounds the kills kept: of the sandboxes' post-mortems that
// have not read theirs yet.
const MaxKills = 64

// Record notes msg, the text of one record of the kernel's log (see
// Message), if it is one of a kill's two records.
func (k *Kills) Record(msg string) {
	if group, pid, ok := OOMKill(msg); ok {
		if len(k.kills) == MaxKills {
			k.kills = append(k.kills[:0], k.kills[1:]...)
		}
		k.kills = append(k.kills, Kill{Group: group, Process: result.Process{PID: pid}})
		return
	}
	for i := len(k.kills) - 1; i >= 0; i-- {
		if kill := &k.kills[i]; !kill.Named {
			if p, ok := Killed(msg, kill.Process.PID); ok {
				kill.Process, kill.Named = *p, true
				return
			}
		}
	}
}

// Find is the latest kill in group.
func (k *Kills) Find(group string) (Kill, bool) {
	for i := len(k.kills) - 1; i >= 0; i-- {
		if k.kills[i].Group == group {
			return k.kills[i], true
		}
	}
	return Kill{}, false
}

// Len is how many kills are kept.
func (k *Kills) Len() int { return len(k.kills) }
