package node

import "sync/atomic"

// Counters are the node's own counts, besides each pool's; the edges
// count their requests and refusals here too, for one set of metrics.
type Counters struct {
	Runs         atomic.Int64 // runs answered
	Failures     atomic.Int64 // runs that could not get a sandbox
	Requests     atomic.Int64 // API requests
	Unauthorized atomic.Int64 // refused for want of a valid token
	Forbidden    atomic.Int64 // refused for a tool outside the token's scope
	// AuditRefusals counts runs and sessions refused because the audit
	// log could not be written.
	AuditRefusals atomic.Int64
}
