package advisor

import (
	"bytes"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Merge applies a fragment Render wrote to a config file's text: each
// tool's egress and services in the fragment replace the tool's own, and
// each service's operations are added to the end of that service's list.
// It returns the config re-encoded; comments of the file that sit on
// kept nodes stay, its layout may not.
func Merge(conf, fragment []byte) ([]byte, error) {
	var root, frag yaml.Node
	if err := yaml.Unmarshal(conf, &root); err != nil {
		return nil, fmt.Errorf("the config: %w", err)
	}
	if err := yaml.Unmarshal(fragment, &frag); err != nil {
		return nil, fmt.Errorf("the suggestion: %w", err)
	}
	top, ftop := document(&root), document(&frag)
	if top == nil || ftop == nil {
		return nil, errors.New("the config and the suggestion must each be a mapping")
	}
	for name, ftool := range pairs(get(ftop, "tools")) {
		tool := get(get(top, "tools"), name)
		if tool == nil || tool.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("the config has no tool %q", name)
		}
		for _, key := range []string{"egress", "services"} {
			if v := get(ftool, key); v != nil {
				set(tool, key, v)
			}
		}
	}
	for name, fsvc := range pairs(get(ftop, "services")) {
		svc := get(get(top, "services"), name)
		ops := get(svc, "operations")
		if ops == nil || ops.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("the config has no service %q with operations", name)
		}
		if add := get(fsvc, "operations"); add != nil {
			ops.Content = append(ops.Content, add.Content...)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

// document is the top mapping of a parsed document, or nil.
func document(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 && n.Content[0].Kind == yaml.MappingNode {
		return n.Content[0]
	}
	return nil
}

// get is the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set sets key in mapping m to v, adding it if absent.
func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// pairs yields the keys and values of mapping m.
func pairs(m *yaml.Node) func(func(string, *yaml.Node) bool) {
	return func(yield func(string, *yaml.Node) bool) {
		if m == nil || m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !yield(m.Content[i].Value, m.Content[i+1]) {
				return
			}
		}
	}
}
