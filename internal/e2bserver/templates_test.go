package e2bserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/node"
)

// TestTemplateBuildRefused asks for the template build calls (the SDKs'
// Template.build, which Mastra's E2BSandbox makes when no template is
// named) of a daemon without builds: each is refused 501 by name,
// saying to name a tool, never a bare 404; without an API key, 401
// first; the node is never asked.
func TestTemplateBuildRefused(t *testing.T) {
	_, base := serveFake(t, func(*config.Tool, *node.Caller, time.Duration) error {
		t.Error("the node was asked for a sandbox")
		return nil
	})
	for _, tt := range []struct {
		name, method, path, key string
		status                  int
		says                    string
	}{
		{"build (v3)", "POST", "/v3/templates", testKey, 501, "airlock does not build templates"},
		{"build (v2)", "POST", "/v2/templates", testKey, 501, "a template is also a tool of the config"},
		{"build (v1)", "POST", "/templates", testKey, 501, "this template build API is not served"},
		{"rebuild", "POST", "/templates/mastra-1", testKey, 501, "this template build API is not served"},
		{"start a build", "POST", "/v2/templates/mastra-1/builds/b1", testKey, 501, "airlock does not build templates"},
		{"upload link", "GET", "/templates/mastra-1/files/abc", testKey, 501, "airlock does not build templates"},
		{"upload", "PUT", "/templates/uploads/0123456789abcdef", "", 404, "no such upload link"},
		{"build status", "GET", "/templates/mastra-1/builds/b1/status", testKey, 501, "airlock does not build templates"},
		{"no key", "POST", "/v3/templates", "", 401, "API key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, base+tt.path, strings.NewReader(`{"name":"mastra-1"}`))
			if tt.key != "" {
				req.Header.Set("X-API-KEY", tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.says) {
				t.Errorf("got %d %s, want %d with %s", resp.StatusCode, b, tt.status, tt.says)
			}
		})
	}
}
