// Package kubernetes holds airlock's Kubernetes manifests (the YAML files
// beside this one, a kustomization; see docs/cluster.md) and the test
// that applies them to a real API server.
package kubernetes
