package cli

import (
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/egress/policy"
	"github.com/airlockhq/airlock/internal/runner"
	"github.com/airlockhq/airlock/sandbox"
)

// allowFlag is the repeatable --allow HOST[:PORT] flag.
type allowFlag struct{ v *[]policy.Destination }

func (f allowFlag) String() string { return "" }

func (f allowFlag) Set(s string) error {
	d, err := policy.ParseDestination(s)
	if err != nil {
		return err
	}
	*f.v = append(*f.v, d)
	return nil
}

// applyTool loads the config (when --config or --tool asks for it) and
// puts the tool's settings under the flags: a flag given on the command
// line always wins over the tool's value.
func (rf *runFlags) applyTool(set map[string]bool) error {
	if rf.configPath == "" && rf.tool == "" {
		return nil
	}
	cfg, err := config.Discover(rf.configPath)
	if err != nil {
		return err
	}
	rf.cfg = cfg
	if rf.tool == "" {
		return nil
	}
	t, err := cfg.Tool(rf.tool)
	if err != nil {
		return err
	}
	limits := t.Limits.Apply(sandbox.DefaultLimits())
	flagged := map[string]func(){
		"memory":   func() { limits.Memory = rf.limits.Memory },
		"pids":     func() { limits.Pids = rf.limits.Pids },
		"disk":     func() { limits.Disk = rf.limits.Disk },
		"fds":      func() { limits.FDs = rf.limits.FDs },
		"output":   func() { limits.Output = rf.limits.Output },
		"time":     func() { limits.Time = rf.limits.Time },
		"cpu":      func() { limits.CPUMilli = rf.limits.CPUMilli },
		"cpu-time": func() { limits.CPUTime = rf.limits.CPUTime },
	}
	for name, apply := range flagged {
		if set[name] {
			apply()
		}
	}
	rf.limits = limits
	rf.mounts = t.Mounts
	if !set["image"] {
		rf.image = t.Image
	}
	rf.spec.User, rf.writableRoot, rf.toolWorkdir = t.User, t.WritableRoot, t.WorkdirSet
	rf.env = append(append([]string(nil), t.Env...), rf.env...)
	if !set["workdir"] && t.Workdir != "" {
		rf.workdir = t.Workdir
	}
	rf.egress = append(append([]policy.Destination(nil), t.Egress...), rf.egress...)
	rf.network = egress.Limits{
		Connections: t.Network.Connections,
		Bytes:       t.Network.Bytes,
		DNSRate:     t.Network.DNSRate,
	}
	for _, name := range t.Services {
		s, err := cfg.Service(name)
		if err != nil {
			return err
		}
		rf.services = append(rf.services, s)
	}
	rf.secrets = cfg.Secrets
	return nil
}

// policy is what binds to the run's sandbox.
func (rf *runFlags) policy() runner.Policy {
	return runner.Policy{
		Tool:     rf.tool,
		Egress:   rf.egress,
		Network:  rf.network,
		Services: rf.services,
		Secrets:  rf.secrets,
	}
}
