package config

import "fmt"

// sprint formats a tool with its limit pointers followed, for failure
// messages.
func sprint(t Tool) string {
	l := t.Limits
	return fmt.Sprintf("%s %q image=%s workdir=%s env=%q egress=%+v network=%+v services=%q line=%d "+
		"limits={mem:%s pids:%s disk:%s fds:%s out:%s cpu:%s time:%s cputime:%s}",
		t.Name, t.Description, t.Image, t.Workdir, t.Env, t.Egress, t.Network, t.Services, t.Line,
		ptr(l.Memory), ptr(l.Pids), ptr(l.Disk), ptr(l.FDs), ptr(l.Output), ptr(l.CPUMilli), ptr(l.Time), ptr(l.CPUTime))
}

// ptr formats a pointer's target, or "-" for nil.
func ptr[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
