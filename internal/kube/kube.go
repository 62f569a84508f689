// Package kube is the little of the Kubernetes API airlock uses: Leases
// (a node's registration and stats, the front's view of the nodes),
// listed and watched, and server-side apply for the manifests' tests.
//
// It speaks the API's JSON over HTTPS itself rather than through
// client-go, whose weight would reach every airlock process: a node
// renews one object every few seconds and a front watches one kind.
package kube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Errors of the API, by status.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found")
	// ErrConflict: the object exists (create), or changed since it was
	// read (update: its resourceVersion is stale).
	ErrConflict = errdefs.New(errdefs.ErrConflict, "conflict")
	// ErrGone: a watch's resourceVersion is too old; list again.
	ErrGone = errdefs.New(errdefs.ErrNotFound, "resource version too old")
)

// Config says how to reach the API server.
type Config struct {
	// Server is the API server's base URL (https://host:port).
	Server string
	// Token is the bearer token; TokenFile, when set, is read for each
	// request (a projected service account token is rotated).
	Token     string
	TokenFile string
	// CA is the PEM of the server's certificate authority; empty trusts
	// the host's roots.
	CA []byte
	// Namespace is where the objects live.
	Namespace string
}

// The service account's files in a pod.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the pod's own configuration: the API server's service
// address from the environment and the service account's token, CA and
// namespace.
func InCluster() (Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return Config{}, fmt.Errorf("the service account's CA: %w", err)
	}
	ns, err := os.ReadFile(saDir + "/namespace")
	if err != nil {
		return Config{}, fmt.Errorf("the service account's namespace: %w", err)
	}
	return Config{Server: "https://" + net.JoinHostPort(host, port), TokenFile: saDir + "/token", CA: ca, Namespace: strings.TrimSpace(string(ns))}, nil
}

// Client calls one API server.
type Client struct {
	cfg  Config
	base *url.URL
	hc   *http.Client
}

// New checks cfg and returns its client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("kubernetes server %q: want https://host:port", cfg.Server)
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kubernetes: a namespace is required")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if len(cfg.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CA) {
			return nil, errors.New("kubernetes: the CA holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Client{cfg: cfg, base: u, hc: &http.Client{Transport: tr}}, nil
}

// Namespace is the client's namespace.
func (c *Client) Namespace() string { return c.cfg.Namespace }

func (c *Client) token() (string, error) {
	if c.cfg.TokenFile != "" {
		b, err := os.ReadFile(c.cfg.TokenFile)
		if err != nil {
			return "", fmt.Errorf("kubernetes token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return c.cfg.Token, nil
}

// Status is the API's error body.
type Status struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

// do sends one request and decodes a 2xx answer's body into out (when not
// nil); another status is an error of the package's kinds.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, ctype string, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, q, ctype, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("kubernetes %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("kubernetes %s %s: the answer: %w", method, path, err)
		}
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, q url.Values, ctype string, body []byte) (*http.Response, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubernetes %s %s: %w", method, path, err)
	}
	return resp, nil
}

func statusError(method, path string, code int, body []byte) error {
	var st Status
	_ = json.Unmarshal(body, &st)
	msg := st.Message
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
	}
	var kind error
	switch code {
	case http.StatusNotFound:
		kind = ErrNotFound
	case http.StatusConflict:
		kind = ErrConflict
	case http.StatusGone:
		kind = ErrGone
	default:
		return fmt.Errorf("kubernetes %s %s: %d %s", method, path, code, msg)
	}
	return fmt.Errorf("%w: kubernetes %s %s: %s", kind, method, path, msg)
}

// Ready checks that the API server answers and is ready (/readyz).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, "GET", "/readyz", nil, "", nil, nil)
}

// ObjectMeta is the part of an object's metadata airlock reads and
// writes.
type ObjectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	UID             string            `json:"uid,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// MicroTime is the API's time with microseconds.
type MicroTime struct{ time.Time }

const microLayout = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON implements json.Marshaler.
func (t MicroTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(microLayout))
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *MicroTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	p, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = p
	return nil
}

// Lease is a coordination.k8s.io/v1 Lease.
type Lease struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       LeaseSpec  `json:"spec"`
}

// LeaseSpec is a Lease's spec.
type LeaseSpec struct {
	HolderIdentity       string     `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds int32      `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *MicroTime `json:"acquireTime,omitempty"`
	RenewTime            *MicroTime `json:"renewTime,omitempty"`
}

// Expired tells whether the lease's holder has not renewed it within its
// duration, as of now.
func (l *Lease) Expired(now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds <= 0 {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(l.Spec.LeaseDurationSeconds) * time.Second))
}

func (c *Client) leasesPath() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(c.cfg.Namespace) + "/leases"
}

// GetLease reads the lease name.
func (c *Client) GetLease(ctx context.Context, name string) (*Lease, error) {
	var l Lease
	if err := c.do(ctx, "GET", c.leasesPath()+"/"+url.PathEscape(name), nil, "", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// CreateLease creates l (ErrConflict when it exists).
func (c *Client) CreateLease(ctx context.Context, l *Lease) (*Lease, error) {
	l.APIVersion, l.Kind, l.Metadata.Namespace = "coordination.k8s.io/v1", "Lease", c.cfg.Namespace
	body, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	var out Lease
	if err := c.do(ctx, "POST", c.leasesPath(), nil, "application/json", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateLease replaces l, which must carry the resourceVersion it was
// read at (ErrConflict when it changed since).
func (c *Client) UpdateLease(ctx context.Context, l *Lease) (*Lease, error) {
	l.APIVersion, l.Kind, l.Metadata.Namespace = "coordination.k8s.io/v1", "Lease", c.cfg.Namespace
	body, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	var out Lease
	if err := c.do(ctx, "PUT", c.leasesPath()+"/"+url.PathEscape(l.Metadata.Name), nil, "application/json", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteLease deletes the lease name (ErrNotFound when there is none).
func (c *Client) DeleteLease(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", c.leasesPath()+"/"+url.PathEscape(name), nil, "", nil, nil)
}

// ListLeases lists the leases matching the label selector, with the
// resourceVersion to watch from.
func (c *Client) ListLeases(ctx context.Context, selector string) ([]Lease, string, error) {
	var out struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []Lease `json:"items"`
	}
	q := url.Values{}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	if err := c.do(ctx, "GET", c.leasesPath(), q, "", nil, &out); err != nil {
		return nil, "", err
	}
	return out.Items, out.Metadata.ResourceVersion, nil
}

// Event is one change a watch reports.
type Event struct {
	Type     string // ADDED, MODIFIED, DELETED or BOOKMARK
	Lease    Lease
	Bookmark string // the resourceVersion of a BOOKMARK
}

// WatchLeases calls fn for each change of the leases matching selector
// after resourceVersion rv, until ctx ends, the server ends the watch
// (nil: watch again from the last version fn saw) or an error (ErrGone:
// list again).
func (c *Client) WatchLeases(ctx context.Context, selector, rv string, fn func(Event)) error {
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	if rv != "" {
		q.Set("resourceVersion", rv)
	}
	resp, err := c.send(ctx, "GET", c.leasesPath(), q, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return statusError("GET", c.leasesPath()+" (watch)", resp.StatusCode, b)
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("kubernetes watch: %w", err)
		}
		switch ev.Type {
		case "ERROR":
			var st Status
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return fmt.Errorf("%w: %s", ErrGone, st.Message)
			}
			return fmt.Errorf("kubernetes watch: %d %s", st.Code, st.Message)
		case "BOOKMARK":
			var l Lease
			_ = json.Unmarshal(ev.Object, &l)
			fn(Event{Type: ev.Type, Bookmark: l.Metadata.ResourceVersion})
		case "ADDED", "MODIFIED", "DELETED":
			var l Lease
			if err := json.Unmarshal(ev.Object, &l); err != nil {
				return fmt.Errorf("kubernetes watch: a %s lease: %w", ev.Type, err)
			}
			fn(Event{Type: ev.Type, Lease: l})
		}
	}
}

// Apply applies a manifest (one object, YAML or JSON) with server-side
// apply as fieldManager, at the API path of its kind, refusing unknown
// and duplicate fields (fieldValidation=Strict); dryRun asks the
// server to check it and change nothing.
func (c *Client) Apply(ctx context.Context, path string, manifest []byte, fieldManager string, dryRun bool) error {
	q := url.Values{"fieldManager": {fieldManager}, "force": {"true"}, "fieldValidation": {"Strict"}}
	if dryRun {
		q.Set("dryRun", "All")
	}
	return c.do(ctx, "PATCH", path, q, "application/apply-patch+yaml", manifest, nil)
}
