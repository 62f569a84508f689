// Package mcpedge is the node's MCP edge (docs/mcp.md): the configured
// tools as MCP tools, each call a run of the node; the built-in tools of
// a sandbox session tied to an MCP session; and the configured MCP
// servers, each a process of the node in a sandbox of its own under an
// MCP handshake, whose tools it mirrors. It serves MCP's streamable HTTP
// transport (mounted at /mcp by the daemon) and, for `airlock mcp`, a
// server for stdio; a tools/call it can answer without the MCP SDK's
// server goes through a fast path (fast.go) that answers the same.
package mcpedge
