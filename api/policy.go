package api

import "time"

// PolicySuggestion is the answer of GET /v1/tools/{name}/policy-suggestion:
// the narrowest egress and broker config that would have allowed what a
// tool's runs needed, read from the audit log, and what the tool was given
// and never used.
type PolicySuggestion struct {
	Tool string `json:"tool"`
	// Since and Until bound the decisions read; First and Last are the
	// times of the first and last one found (zero when none).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
	// Decisions counts the egress, DNS and broker decisions read.
	Decisions int `json:"decisions"`
	// Truncated says that more decisions were recorded than are read for
	// one suggestion: the suggestion covers the oldest ones only.
	Truncated bool `json:"truncated,omitempty"`
	// Wildcards says whether names were allowed to collapse into
	// wildcards.
	Wildcards bool `json:"wildcards,omitempty"`
	// Egress is the proposed egress list, in order: the tool's entries
	// (kept, widened or dropped) and then the added ones.
	Egress []EgressSuggestion `json:"egress"`
	// Services are the services the tool is given or called, each with
	// what is proposed for it.
	Services []ServiceSuggestion `json:"services"`
	// Notes are refusals no allowlist change should answer (metadata,
	// private addresses, caps) and anything else the reader should know.
	Notes []string `json:"notes"`
	// YAML is the suggestion as a config fragment (see Merge rules in
	// its header comment): what `airlock policy suggest` prints.
	YAML string `json:"yaml"`
}

// Actions of a suggestion's entries.
const (
	// SuggestKeep: the entry is in the config and was used.
	SuggestKeep = "keep"
	// SuggestWiden: the entry is in the config and was used or refused on
	// a port it lacks; the suggestion adds the ports.
	SuggestWiden = "widen"
	// SuggestAdd: not in the config, and runs were refused for want of it.
	SuggestAdd = "add"
	// SuggestDrop: in the config and never used in the period read.
	SuggestDrop = "drop"
)

// EgressSuggestion is one entry of a proposed egress list.
type EgressSuggestion struct {
	// Entry is the destination as config writes it: "api.example.com",
	// "api.example.com:443,8443", "*.example.com", "203.0.113.7:22".
	Entry string `json:"entry"`
	// Action is keep, widen, add or drop.
	Action string `json:"action"`
	// Addresses, Private and Opaque are a config entry's own options,
	// kept as they are.
	Addresses []string `json:"addresses,omitempty"`
	Private   bool     `json:"private,omitempty"`
	Opaque    bool     `json:"opaque,omitempty"`
	// Allowed and Refused count the decisions the entry answers: allowed
	// under the config now, refused for want of this entry.
	Allowed int `json:"allowed"`
	Refused int `json:"refused"`
	// Covers, for a wildcard, lists the distinct names seen that it
	// covers: its cost.
	Covers []string  `json:"covers,omitempty"`
	First  time.Time `json:"first,omitzero"`
	Last   time.Time `json:"last,omitzero"`
	// Why says, for people, what the counts mean for this entry.
	Why string `json:"why"`
}

// ServiceSuggestion is what is proposed for one broker service of a tool.
type ServiceSuggestion struct {
	Service string `json:"service"`
	// Action is keep (given and called), add (called, not given), drop
	// (given, never called).
	Action     string                `json:"action"`
	Operations []OperationSuggestion `json:"operations"`
}

// OperationSuggestion is one operation of a service.
type OperationSuggestion struct {
	// Operation is "METHOD /path" as config writes it.
	Operation string `json:"operation"`
	// Action is keep, add or drop. A dropped operation is only reported:
	// a service's operations may serve other tools too.
	Action  string    `json:"action"`
	Allowed int       `json:"allowed"`
	Refused int       `json:"refused"`
	First   time.Time `json:"first,omitzero"`
	Last    time.Time `json:"last,omitzero"`
}
