// Package tokens checks the bearer tokens of a config (server.tokens):
// the daemon's TCP and E2B listeners and the cluster's front check the
// same ones.
package tokens

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlockhq/airlock/internal/config"
)

// Set holds the tokens' digests; comparing digests in constant time
// keeps the comparison from leaking a token byte by byte.
type Set struct {
	digests [][sha256.Size]byte
	tokens  []*config.Token
}

// Load reads every token's secret now: a server that cannot check
// tokens must not start.
func Load(c *config.Config) (*Set, error) {
	ts := &Set{}
	for i := range c.Server.Tokens {
		t := &c.Server.Tokens[i]
		sec, ok := c.Secrets[t.Secret]
		if !ok {
			return nil, fmt.Errorf("token %q: secret %q is not defined", t.Name, t.Secret)
		}
		v, err := sec.Read()
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", t.Name, err)
		}
		if len(v) < 16 {
			return nil, fmt.Errorf("token %q: the secret is under 16 bytes; use a long random token", t.Name)
		}
		ts.digests = append(ts.digests, sha256.Sum256([]byte(v)))
		ts.tokens = append(ts.tokens, t)
	}
	return ts, nil
}

// Match returns the token whose value v is, or nil. Every digest is
// compared, whatever matches.
func (ts *Set) Match(v string) *config.Token {
	d := sha256.Sum256([]byte(v))
	var found *config.Token
	for i, td := range ts.digests {
		if subtle.ConstantTimeCompare(d[:], td[:]) == 1 {
			found = ts.tokens[i]
		}
	}
	return found
}

// Bearer returns the token of r's "Authorization: Bearer" header, or nil
// when it has none that is valid.
func (ts *Set) Bearer(r *http.Request) *config.Token {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || v == "" {
		return nil
	}
	return ts.Match(v)
}

// Challenge is the WWW-Authenticate value of a 401 answer to r, which
// Bearer found no valid token in (RFC 6750 section 3): a request without
// credentials gets the bare challenge, one whose token is wrong
// error="invalid_token". It never names resource_metadata, as a server
// using OAuth would (MCP's authorization spec): airlock takes only the
// bearer tokens of its config, and pointing a client (the MCP Inspector,
// say) at an authorization server would start an OAuth flow that cannot
// succeed instead of telling the user that the token is wrong.
func Challenge(r *http.Request) string {
	if r.Header.Get("Authorization") == "" {
		return `Bearer realm="airlock"`
	}
	return `Bearer realm="airlock", error="invalid_token", error_description="the bearer token is not valid"`
}

// ChallengeMessage is the message of a 401 answer to r, to go with
// Challenge.
func ChallengeMessage(r *http.Request) string {
	if r.Header.Get("Authorization") == "" {
		return "a valid bearer token is required (Authorization: Bearer ...)"
	}
	return "the bearer token is not valid: it is not one of the daemon's tokens (Authorization: Bearer ...)"
}
