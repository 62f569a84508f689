// Command testmcp is a small stdio MCP server for the gateway's tests:
// real MCP on real pipes, with tools that misbehave on request (crash,
// hang) or try what a hostile server would (read a host path, dial an
// address) and report what happened.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type textIn struct {
	Text string `json:"text"`
}

type pathIn struct {
	Path string `json:"path"`
}

type addrIn struct {
	Addr string `json:"addr"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "testmcp", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its text"}, func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
		return text(in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits at once"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "testmcp: crashing on request")
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "never answers"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		select {}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "reads a file"}, func(_ context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
		b, err := os.ReadFile(in.Path)
		if err != nil {
			return text("error: " + err.Error()), nil, nil
		}
		return text("read: " + string(b)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "dial", Description: "opens a TCP connection"}, func(_ context.Context, _ *mcp.CallToolRequest, in addrIn) (*mcp.CallToolResult, any, error) {
		c, err := net.DialTimeout("tcp", in.Addr, 2*time.Second)
		if err != nil {
			return text("error: " + err.Error()), nil, nil
		}
		c.Close()
		return text("connected"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "lists its environment"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return text(strings.Join(os.Environ(), "\n")), nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "testmcp:", err)
		os.Exit(1)
	}
}
