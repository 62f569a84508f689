package e2bserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/node"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/volume"
	"github.com/airlockhq/airlock/sandbox"
)

// TestVolumeProtocol drives the volume calls and a create's volumeMounts
// through the edge over a fake node: the key's volumes by id or name and
// never another's, the content API refused by name (501, never a 404
// that the SDKs read as a missing file), and mounts checked before the
// node is asked: a place airlock builds (/home/user above all, where
// E2B's users put volumes), a path not absolute and clean, two at one
// place, too many, another key's volume, a snapshot's sandbox.
func TestVolumeProtocol(t *testing.T) {
	var asked []string
	f, base := serveFake(t, func(tool *config.Tool, c *node.Caller, life time.Duration) error {
		asked = append(asked, "tool "+tool.Name)
		return &node.Refusal{Kind: sandbox.ErrCapacity, Msg: "at capacity"}
	})
	f.openVols = func(tool *config.Tool, c *node.Caller, mounts []node.VolumeMount) error {
		for _, m := range mounts {
			asked = append(asked, m.Volume+"@"+m.Path)
		}
		return &node.Refusal{Kind: sandbox.ErrCapacity, Msg: "at capacity"}
	}
	f.vols = []volume.Meta{
		{ID: "vol_1", Name: "mine", Owner: "token:ci", Size: 1 << 30},
		{ID: "vol_x", Name: "theirs", Owner: "token:someone", Size: 1 << 30},
	}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		says                     string
	}{
		{"list", "GET", "/volumes", "", 200, `[{"volumeID":"vol_1","name":"mine"}]`},
		{"get by id", "GET", "/volumes/vol_1", "", 200, `"volumeID":"vol_1","name":"mine","token":"unserved_`},
		{"get another's", "GET", "/volumes/vol_x", "", 404, `volume \"vol_x\" not found`},
		{"delete another's", "DELETE", "/volumes/theirs", "", 404, `volume \"theirs\" not found`},
		{"create", "POST", "/volumes", `{"name":"new"}`, 201, `"volumeID":"vol_new","name":"new","token":"unserved_`},
		{"content: list", "GET", "/volumecontent/vol_1/dir?path=/", "", 501, "mount the volume in a sandbox"},
		{"content: write", "PUT", "/volumecontent/vol_1/file?path=/x", "data", 501, "volume content API"},
		{"content: remove", "DELETE", "/volumecontent/vol_1/path?path=/x", "", 501, "volume content API"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := do(tt.method, tt.path, tt.body)
			if status != tt.status || !strings.Contains(b, tt.says) {
				t.Errorf("got %d %s, want %d with %s", status, b, tt.status, tt.says)
			}
		})
	}
	if status, b := do("GET", "/volumes/vol_1", ""); status == 200 {
		var a, c struct{ Token string }
		_ = json.Unmarshal([]byte(b), &a)
		_, b2 := do("GET", "/volumes/vol_1", "")
		_ = json.Unmarshal([]byte(b2), &c)
		if len(a.Token) < 40 || a.Token == c.Token {
			t.Errorf("tokens %q, %q: want fresh random ones", a.Token, c.Token)
		}
	}

	f.snaps = []snapshot.Meta{{ID: "snap_1", Name: "snapped", Owner: "token:ci", Tool: "sh", Created: time.Now()}}
	f.openSnap = func(snapshot.Meta, *node.Caller, time.Duration) error { return errors.New("asked") }
	// A sandbox from a snapshot takes volumes too: the core is asked
	// for both.
	asked = nil
	if status, b := do("POST", "/v2/sandboxes", `{"templateID":"snapped","volumeMounts":[{"name":"mine","path":"/mnt/data"}]}`); status != 503 || strings.Join(asked, ",") != "mine@/mnt/data" {
		t.Errorf("a snapshot's sandbox with volumes: %d %s, the core asked %q; want the mounts passed on", status, b, asked)
	}
	nine := strings.Repeat(`{"name":"mine","path":"/mnt/a"},`, 8) + `{"name":"mine","path":"/mnt/b"}`
	for _, tt := range []struct {
		name, mounts string
		status       int
		says, asked  string
	}{
		{"mounted", `[{"name":"mine","path":"/mnt/data"}]`, 503, "at capacity", "mine@/mnt/data"},
		{"by id", `[{"name":"vol_1","path":"/srv/x"}]`, 503, "at capacity", "vol_1@/srv/x"},
		{"none", `[]`, 503, "at capacity", "tool sh"},
		{"in /home/user", `[{"name":"mine","path":"/home/user/data"}]`, 400, `volume \"mine\": mount target \"/home/user/data\": /home is built by airlock`, ""},
		{"where it may go", `[{"name":"mine","path":"/home/user"}]`, 400, "choose another place, like /srv", ""},
		{"the workspace", `[{"name":"mine","path":"/workspace/x"}]`, 400, `\"/workspace/x\"`, ""},
		{"climbing out", `[{"name":"mine","path":"/mnt/../etc"}]`, 400, "want an absolute, clean path", ""},
		{"relative", `[{"name":"mine","path":"data"}]`, 400, "want an absolute, clean path", ""},
		{"over the system", `[{"name":"mine","path":"/"}]`, 400, "the root is airlock's", ""},
		{"two at one place", `[{"name":"mine","path":"/mnt/a"},{"name":"mine","path":"/mnt/a"}]`, 400, `two volumes at \"/mnt/a\"`, ""},
		{"too many", `[` + nine + `]`, 400, "9 volumes; a sandbox has at most 8", ""},
		{"no name", `[{"path":"/mnt/a"}]`, 400, "names no volume", ""},
		{"another key's", `[{"name":"theirs","path":"/mnt/a"}]`, 404, `volume \"theirs\" not found`, ""},
		{"another key's id", `[{"name":"vol_x","path":"/mnt/a"}]`, 404, `volume \"vol_x\" not found`, ""},
		{"not a list", `{"name":"mine"}`, 400, "not a sandbox request", ""},
	} {
		t.Run("mount "+tt.name, func(t *testing.T) {
			asked = nil
			status, b := do("POST", "/v2/sandboxes", `{"templateID":"sh","volumeMounts":`+tt.mounts+`}`)
			if status != tt.status || !strings.Contains(b, tt.says) {
				t.Errorf("got %d %s, want %d with %s", status, b, tt.status, tt.says)
			}
			if got := strings.Join(asked, ","); got != tt.asked {
				t.Errorf("the core was asked %q, want %q", got, tt.asked)
			}
		})
	}
}
