package tokens

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestChallenge: a request without credentials gets the bare challenge,
// one with a wrong token invalid_token; neither names resource_metadata,
// which would send an MCP client to an OAuth authorization server.
func TestChallenge(t *testing.T) {
	tests := []struct{ auth, want string }{
		{"", `Bearer realm="airlock"`},
		{"Bearer wrong", `Bearer realm="airlock", error="invalid_token", error_description="the bearer token is not valid"`},
		{"Basic dTpw", `Bearer realm="airlock", error="invalid_token", error_description="the bearer token is not valid"`},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/mcp", nil)
		if tt.auth != "" {
			r.Header.Set("Authorization", tt.auth)
		}
		if got := Challenge(r); got != tt.want || strings.Contains(got, "resource_metadata") {
			t.Errorf("Authorization %q: got %q, want %q", tt.auth, got, tt.want)
		}
	}
}
