// Package brokerspec describes what the credential broker serves: the
// services sandboxes reach through it, each with its upstream, its
// credential and the operations it forwards. Package config fills these
// in from a file and checks them; package broker serves them as they are.
// It links only the standard library and the leaves route (operation
// templates) and egress/policy (destinations), so that the broker need not
// link config (and YAML), nor config the broker (and HTTP).
package brokerspec

import (
	"net/url"
	"strings"

	"github.com/airlockhq/airlock/internal/broker/route"
	"github.com/airlockhq/airlock/internal/egress/policy"
)

// Placeholders replaced by the broker.
const (
	// SecretPlaceholder stands for the secret's value in
	// Credential.Template.
	SecretPlaceholder = "{secret}"
	// URLPlaceholder stands for the service's broker URL in the values of
	// Service.Env.
	URLPlaceholder = "{url}"
)

// Service is an upstream HTTP API that sandboxes reach only through the
// credential broker, at $AIRLOCK_BROKER_URL/<name>/<path>. The broker
// forwards only the declared operations and attaches the credential on
// the host, so confined code never holds it.
type Service struct {
	// Name is the service's key in the file; it is a URL path segment of
	// the broker.
	Name string
	// Upstream is the base URL calls are forwarded to: scheme http or
	// https, a host, an optional port and an optional base path without
	// a trailing slash ("" for the root); never user info, a query or a
	// fragment.
	Upstream *url.URL
	// Destination is the upstream host and port as an egress destination,
	// with the service's pinned addresses and private option. The broker
	// dials through it, so an upstream gets the same address checks as
	// egress. It always has exactly one port: the URL's, or 443 for https
	// and 80 for http.
	Destination policy.Destination
	// CA is the absolute path of a PEM file of CA certificates to trust
	// for an https upstream instead of the system's, or "". The file is
	// read when the broker starts, not when the config is parsed.
	CA string
	// Credential says which secret to attach to calls, and how.
	Credential Credential
	// Transparent: clients in the sandbox reach the service at the
	// upstream's own host name, unchanged, their TLS to it terminated by
	// airlock with the sandbox's own authority (transparent brokering,
	// docs/decisions/0035), as well as at the broker's endpoint.
	Transparent bool
	// Set are request headers set on every call to the service, where
	// the call's operation forwards the header anyway (an E2B create's
	// network.rules transform, docs/e2b.md): never a credential, never
	// one that describes the connection or the body (broker.CheckSet).
	// Nil for a service as the config file declares it.
	Set map[string]string
	// Env holds the placeholder variables given to sandboxes of the tools
	// that use the service, in file order. URLPlaceholder in a value
	// stands for the service's broker URL. A tool's own env wins over a
	// service's for the same name.
	Env []EnvVar
	// Operations are the calls the broker forwards, in file order, with
	// the service's defaults filled in. Never empty.
	Operations []Operation
	// Line is the line of the service's key, for later error messages.
	Line int
}

// Credential says how the broker attaches a secret to a call.
type Credential struct {
	// Secret names the secret: an entry of the config's secrets, and of
	// the broker's Config.Secrets.
	Secret string
	// Header is the request header that carries the credential, in
	// canonical form ("Authorization"). Whatever the sandbox sends in it
	// is replaced.
	Header string
	// Template is the header's value with SecretPlaceholder, exactly
	// once, standing for the secret ("Bearer {secret}").
	Template string
}

// Value returns the header value for secret.
func (c Credential) Value(secret string) string {
	return strings.Replace(c.Template, SecretPlaceholder, secret, 1)
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name, Value string
}

// Operation is one call the broker may forward to a service.
type Operation struct {
	// Template is the method and path template the call must match.
	Template *route.Template
	// Query lists the query parameters the call may have; empty means
	// none.
	Query []string
	// ContentTypes lists the media types ("application/json") a request
	// body may have; nil means any.
	ContentTypes []string
	// MaxRequest and MaxResponse cap the request and response bodies, in
	// bytes; both are more than zero.
	MaxRequest, MaxResponse int64
	// Rate caps calls per minute: at least 1 (config.MaxRate at most).
	Rate int
	// Headers are request headers the call may send upstream beyond the
	// broker's own short list (Accept, Accept-Language, Content-Type,
	// User-Agent), in canonical form ("X-Github-Api-Version").
	Headers []string
	// Line is the line of the operation's item, for later error messages.
	Line int
}

// WithSet returns a copy of s that sets the headers set on its calls.
func (s *Service) WithSet(set map[string]string) *Service {
	c := *s
	c.Set = set
	return &c
}
