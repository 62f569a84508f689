package front

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxNodeMetrics bounds what is read of one node's metrics.
const maxNodeMetrics = 16 << 20

// metrics serves GET /metrics: every live node's metrics under the same
// names (docs/api.md#get-metrics), each sample labelled with its node,
// family by family, then the front's own. Asked with the caller's token,
// as every call the front sends on.
func (f *Front) metrics(w http.ResponseWriter, r *http.Request) {
	nodes, resps := f.fanOut(r)
	var m merged
	var unreached []string
	for i, resp := range resps {
		if resp == nil {
			unreached = append(unreached, nodes[i].Name)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			unreached = append(unreached, nodes[i].Name)
			f.logger.Warn("front: a node's metrics", "node", nodes[i].Name, "status", resp.Status)
			continue
		}
		err := m.add(io.LimitReader(resp.Body, maxNodeMetrics), nodes[i].Name)
		resp.Body.Close()
		if err != nil {
			unreached = append(unreached, nodes[i].Name)
			f.logger.Warn("front: a node's metrics", "node", nodes[i].Name, "err", err)
		}
	}
	if len(unreached) > 0 {
		w.Header().Set("X-Airlock-Unreached", strings.Join(unreached, ","))
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	m.write(&b)
	fmt.Fprintf(&b, "# HELP airlock_front_nodes_live Nodes live in the cluster, as this front sees them.\n# TYPE airlock_front_nodes_live gauge\nairlock_front_nodes_live %d\n", len(nodes))
	fmt.Fprintf(&b, "# HELP airlock_front_nodes_unreached Live nodes whose metrics this answer lacks.\n# TYPE airlock_front_nodes_unreached gauge\nairlock_front_nodes_unreached %d\n", len(unreached))
	_, _ = io.WriteString(w, b.String())
}

// merged are metric families gathered from nodes, in the order first
// seen.
type merged struct {
	order []string
	fams  map[string]*family
}

type family struct {
	help, typ string
	samples   []string
}

func (m *merged) family(name string) *family {
	if m.fams == nil {
		m.fams = map[string]*family{}
	}
	f := m.fams[name]
	if f == nil {
		f = &family{}
		m.fams[name] = f
		m.order = append(m.order, name)
	}
	return f
}

// add reads one node's Prometheus text: comments name families, and
// each sample goes to its family (a histogram's _bucket, _sum and _count
// to the histogram's) with node="NAME" as its first label.
func (m *merged) add(rd io.Reader, node string) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	cur := ""
	label := `node="` + escapeLabel(node) + `"`
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			kind, rest, _ := strings.Cut(rest, " ")
			name, text, _ := strings.Cut(rest, " ")
			if name == "" {
				continue
			}
			switch kind {
			case "HELP":
				if f := m.family(name); f.help == "" {
					f.help = text
				}
			case "TYPE":
				if f := m.family(name); f.typ == "" {
					f.typ = text
				}
				cur = name
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return fmt.Errorf("a line that is not a sample: %.80q", line)
		}
		name := line[:end]
		fam := name
		if cur != "" && (name == cur || strings.HasPrefix(name, cur+"_") && isSuffix(name[len(cur):])) {
			fam = cur
		}
		var s string
		if line[end] == '{' {
			if strings.HasPrefix(line[end+1:], "}") {
				s = name + "{" + label + line[end+1:]
			} else {
				s = name + "{" + label + "," + line[end+1:]
			}
		} else {
			s = name + "{" + label + "}" + line[end:]
		}
		f := m.family(fam)
		f.samples = append(f.samples, s)
	}
	return sc.Err()
}

// isSuffix says a sample name's tail is a histogram's or summary's part.
func isSuffix(s string) bool {
	return s == "_bucket" || s == "_sum" || s == "_count"
}

func (m *merged) write(w io.Writer) {
	for _, name := range m.order {
		f := m.fams[name]
		if f.help != "" {
			fmt.Fprintf(w, "# HELP %s %s\n", name, f.help)
		}
		if f.typ != "" {
			fmt.Fprintf(w, "# TYPE %s %s\n", name, f.typ)
		}
		for _, s := range f.samples {
			fmt.Fprintln(w, s)
		}
	}
}

// escapeLabel escapes a label value as the text format wants.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
