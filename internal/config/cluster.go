package config

import (
	"net/url"
	"regexp"

	"go.yaml.in/yaml/v3"
)

var (
	clusterKeys    = []string{"advertise", "kubernetes", "node"}
	kubernetesKeys = []string{"ca_file", "namespace", "server", "token_file"}
)

// Cluster makes the daemon a node of a cluster (docs/cluster.md): it
// registers in the Kubernetes API, with its warm capacity, for fronts
// to find and place work on.
type Cluster struct {
	// Enabled is true when the section is present.
	Enabled bool
	// Node is the node's name; "" takes $AIRLOCK_NODE_NAME at start.
	Node string
	// Advertise is the URL fronts reach this node's TCP API at; "" takes
	// $AIRLOCK_NODE_ADVERTISE at start.
	Advertise string
	// Kubernetes says how to reach the API server; zero is the pod's own
	// (in-cluster) configuration.
	Kubernetes Kubernetes
}

// Kubernetes is an API server to use instead of the pod's own.
type Kubernetes struct {
	Server    string
	TokenFile string
	CAFile    string
	Namespace string
}

// nodeName is a node name: a DNS label, which session ids carry.
var nodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidNodeName reports whether s may name a node.
func ValidNodeName(s string) bool { return nodeName.MatchString(s) }

// CheckAdvertise checks a node's advertised URL.
func CheckAdvertise(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return errAdvertise
	}
	return nil
}

var errAdvertise = errorString("want the node's TCP API as http(s)://host:port")

type errorString string

func (e errorString) Error() string { return string(e) }

func (p *parser) cluster(n *yaml.Node, c *Config) error {
	const at = "cluster"
	c.Cluster.Enabled = true
	if isNull(n) {
		return nil
	}
	fs, err := p.fields(n, at, "a mapping of cluster settings", clusterKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "node":
			if c.Cluster.Node, err = p.str(f.val, sub); err == nil && !ValidNodeName(c.Cluster.Node) {
				err = p.errAt(f.val, sub, "%s is not a node name: lower-case letters, digits and '-', at most 63", quote(c.Cluster.Node))
			}
		case "advertise":
			if c.Cluster.Advertise, err = p.str(f.val, sub); err == nil {
				if e := CheckAdvertise(c.Cluster.Advertise); e != nil {
					err = p.errAt(f.val, sub, "%s: %v", quote(c.Cluster.Advertise), e)
				}
			}
		case "kubernetes":
			err = p.kubernetes(f.val, sub, &c.Cluster.Kubernetes)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) kubernetes(n *yaml.Node, at string, k *Kubernetes) error {
	fs, err := p.fields(n, at, "a mapping with server, token_file, ca_file and namespace", kubernetesKeys)
	if err != nil {
		return err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		switch f.name {
		case "server":
			if k.Server, err = p.str(f.val, sub); err == nil {
				if u, e := url.Parse(k.Server); e != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
					err = p.errAt(f.val, sub, "%s is not the API server's URL (https://host:port)", quote(k.Server))
				}
			}
		case "token_file":
			k.TokenFile, err = p.absPath(f.val, sub)
		case "ca_file":
			k.CAFile, err = p.absPath(f.val, sub)
		case "namespace":
			if k.Namespace, err = p.str(f.val, sub); err == nil && !ValidNodeName(k.Namespace) {
				err = p.errAt(f.val, sub, "%s is not a namespace name", quote(k.Namespace))
			}
		}
		if err != nil {
			return err
		}
	}
	if k.Server == "" {
		return p.errAt(n, at, "server is required: the API server's URL (leave kubernetes out to use the pod's own)")
	}
	if k.Namespace == "" {
		return p.errAt(n, at, "namespace is required with server")
	}
	return nil
}
