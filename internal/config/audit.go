package config

import (
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var auditKeys = []string{"export", "path", "retention", "sync"}

// Audit defaults.
const (
	DefaultAuditPath      = "/var/lib/airlock/audit.db"
	DefaultAuditRetention = 30 * 24 * time.Hour
)

// Audit configures the daemon's audit log.
type Audit struct {
	// Path is the SQLite database file.
	Path string
	// Retention is how long events are kept; 0 keeps them forever.
	Retention time.Duration
	// Sync is "normal" (an acknowledged event survives a crash of the
	// daemon) or "full" (it survives a crash of the host too, at one
	// fsync per group commit).
	Sync string
	// Export is "stdout" to write every event there too, as a JSON line,
	// for a log pipeline (a cluster's: docs/cluster.md); "" for none.
	Export string
	// Set is true when the file has an audit section: then a one-shot
	// airlock run that reads the file records itself there too.
	Set bool
}

func defaultAudit() Audit {
	return Audit{Path: DefaultAuditPath, Retention: DefaultAuditRetention, Sync: "normal"}
}

func (p *parser) audit(n *yaml.Node, c *Config) error {
	const at = "audit"
	fs, err := p.fields(n, at, "a mapping of audit log settings", auditKeys)
	if err != nil {
		return err
	}
	c.Audit.Set = true
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "path":
			c.Audit.Path, err = p.absPath(f.val, sub)
		case "retention":
			c.Audit.Retention, err = p.retention(f.val, sub)
		case "export":
			if c.Audit.Export, err = p.str(f.val, sub); err == nil && c.Audit.Export != "stdout" {
				err = p.errAt(f.val, sub, "%s: want \"stdout\" (events as JSON lines, for a log pipeline)", quote(c.Audit.Export))
			}
		case "sync":
			if c.Audit.Sync, err = p.str(f.val, sub); err == nil && c.Audit.Sync != "normal" && c.Audit.Sync != "full" {
				err = p.errAt(f.val, sub, "%s: want \"normal\" or \"full\"", quote(c.Audit.Sync))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// retention is a duration, or a whole number of days ("30d"); "0" keeps
// events forever.
func (p *parser) retention(n *yaml.Node, at string) (time.Duration, error) {
	s, err := p.str(n, at)
	if err != nil {
		return 0, err
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.Atoi(days)
		if err != nil || d < 0 || d > 36500 {
			return 0, p.errAt(n, at, "%s: want a number of days from 0 to 36500, like \"30d\", or a duration like \"72h\"", quote(s))
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := p.duration(n, at, true)
	if err != nil {
		return 0, err
	}
	return *d, nil
}
