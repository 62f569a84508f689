package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockhq/airlock/api"
)

// hostile holds what a terminal acts on: C1's CSI and OSC (which some
// terminals take as ESC [ and ESC ]), ESC itself, BEL, DEL, the line and
// paragraph separators.
const hostile = "csi\u009b2J osc\u009d0;owned\u009c esc\x1b[31m bel\x07 del\x7f sep\u2028\u2029 nel\u0085"

// rawControl names the first byte sequence in out that a terminal could
// act on: a C0 control other than newline and tab, DEL, a C1 control
// (U+0080-U+009F, \xc2\x80-\xc2\x9f in UTF-8), a byte 0x80-0x9f that is
// not part of valid UTF-8, U+2028 or U+2029.
func rawControl(out string) string {
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			if c := out[i]; c >= 0x80 && c <= 0x9f {
				return fmt.Sprintf("raw byte %#x at %d", c, i)
			}
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r <= 0x9f, r == 0x2028, r == 0x2029:
			return fmt.Sprintf("raw %U at %d: ...%q...", r, i, out[max(0, i-20):min(len(out), i+20)])
		}
		i += n
	}
	return ""
}

// TestOutputEscapesControls: a command line with C1 controls in it (and
// ESC, DEL, U+2028...) is printed by airlock audit, in lines and as
// JSON, with each of them escaped: the output bytes hold none raw.
// Before, the C1 controls went to the terminal as they were (JSON does
// not escape them).
func TestOutputEscapesControls(t *testing.T) {
	requireRoot(t)
	sock, c := serveForTest(t, "tools:\n  sh: {}\n")
	if _, err := c.Run(t.Context(), api.RunRequest{Tool: "sh", Argv: []string{"echo", hostile}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"audit", "--socket", sock, "--kind", "run.started"},
		{"audit", "--socket", sock, "--kind", "run.started", "--json"},
		{"ps", "--socket", sock},
		{"ps", "--socket", sock, "--json"},
	} {
		o := execAirlock(t, nil, "", args...)
		if o.code != 0 {
			t.Fatalf("%v: %+v", args, o)
		}
		if bad := rawControl(o.stdout + o.stderr); bad != "" {
			t.Errorf("airlock %s prints %s", strings.Join(args, " "), bad)
		}
		if args[0] == "audit" && !strings.Contains(o.stdout, `csi\u009b2J osc\u009d0;owned\u009c`) {
			t.Errorf("airlock %s does not show the command line, escaped: %q", strings.Join(args, " "), o.stdout)
		}
	}
}

// js is s as a JSON string, as Go writes it: C0 controls escaped, C1
// controls raw.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestRemoteOutputEscapesControls: what a daemon or front at --host
// answers is no more trusted than a sandbox: controls in any field of
// its audit events, its ps list and its errors — raw C1 characters,
// bytes that are not UTF-8 in an event's detail, newlines that would
// forge a line — are escaped by airlock audit and airlock ps.
func TestRemoteOutputEscapesControls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/audit":
			// Raw C1 characters in strings are valid JSON, and a detail
			// is passed on as the bytes it is.
			fmt.Fprintf(w, `{"events":[{"id":1,"time":"2026-01-02T15:04:05Z","kind":"run.started\u009b","tool":%s,"client":"token:x\n2026-01-02T15:04:06.000Z 2 run.finished exited","node":"n\u009d","detail":{"argv":[%s,"%s"]}}],"next":1}`,
				js(hostile), js(hostile), "\x9b\x9d\xc2 raw\u009b")
		case "/v1/ps":
			fmt.Fprintf(w, `{"runs":[{"id":"r_1\u009b","kind":"run","tool":%s,"client":"c\u2028","sandbox_id":"%s","node":"n\u009d"}],"sessions":[{"id":"s_1","tool":%s,"sandbox_id":"x"}],"unreached":["bad\u009bnode"]}`,
				js(hostile), "sb\x9b", js(hostile))
		case "/v1/runs/r_x":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"code":"not_found","error":%s}`, js("no run "+hostile))
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	env := []string{"AIRLOCK_TOKEN=remote-token-0123456789", "HOME=" + filepath.Join(dir, "home")}
	for _, args := range [][]string{
		{"audit", "--host", srv.URL},
		{"audit", "--host", srv.URL, "--json"},
		{"ps", "--host", srv.URL},
		{"ps", "--host", srv.URL, "--json"},
		{"kill", "--host", srv.URL, "r_x"},
	} {
		o := execAirlock(t, env, "", args...)
		if bad := rawControl(o.stdout + o.stderr); bad != "" {
			t.Errorf("airlock %s prints %s", strings.Join(args, " "), bad)
		}
		if args[0] != "ps" && !strings.Contains(o.stdout+o.stderr, `\u009b2J`) {
			t.Errorf("airlock %s does not show the answer, escaped: %+v", strings.Join(args, " "), o)
		}
		if args[0] == "audit" && !strings.Contains(args[len(args)-1], "json") && strings.Count(o.stdout, "\n") != 1 {
			t.Errorf("airlock %s prints one event as %d lines: %q", strings.Join(args, " "), strings.Count(o.stdout, "\n"), o.stdout)
		}
	}
}
