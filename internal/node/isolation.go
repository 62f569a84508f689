package node

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/sbspec"
)

// checkIsolation makes sure this host can give every tool in tools the
// isolation it asks for: a tool with isolation gvisor on a host where a
// gVisor sandbox cannot be made stops the start (or the reload) with the
// reason, rather than fail its every run.
func (n *Node) checkIsolation(ctx context.Context, tools []*config.Tool) error {
	for _, t := range tools {
		if t.Isolation != sbspec.IsolationGVisor {
			continue
		}
		path, version, err := n.rt.GVisor(ctx)
		if err != nil {
			return fmt.Errorf("tool %s asks for isolation gvisor, which this host cannot give: %w", t.Name, err)
		}
		n.opts.Logger.Info("gvisor isolation is available", "runsc", path, "version", version)
		return nil
	}
	return nil
}
