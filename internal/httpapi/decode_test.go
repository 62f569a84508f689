package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// leaksGo reports whether a message meant for a caller names Go's types
// or the daemon's structs.
func leaksGo(msg string) bool {
	for _, s := range []string{"Go struct", "Go value", "[]string", "RunRequest", "ExecRequest", "map[", "json:", "int64", "uint"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// TestDecodeErrorsForCallers checks that a body of the wrong shape is
// refused with a sentence naming the field and the shape it wants, not
// encoding/json's Go types, on every edge's decoder.
func TestDecodeErrorsForCallers(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"tool":"sh","argv":"ls"}`, `"argv": want an array of strings, got a string`},
		{`{"tool":"sh","argv":["ls"],"env":"A=b"}`, `"env": want an array of "KEY=VALUE" strings or an object of strings`},
		{`{"tool":"sh","argv":["ls"],"env":{"A":1}}`, `"env": the value of "A": want a string`},
		{`{"tool":"sh","argv":["ls"],"env":{"A=B":"c"}}`, `"env": the name "A=B" holds "="`},
		{`{"tool":"sh","argv":["ls"],"env":[1]}`, `"env": want an array of "KEY=VALUE" strings`},
		{`{"tool":7}`, `"tool": want a string, got a number`},
		{`{"tool":"sh","tty":{"rows":"x"}}`, `"tty.rows": want an integer, got a string`},
		{`["sh"]`, `want an object, got an array`},
		{`{"tool":"sh",`, `ends before its value does`},
		{`{"tool":"sh"}x`, `more than one value`},
		{`{"tool" "sh"}`, `not valid JSON at byte`},
		{``, `the body is empty`},
		{`{"tool":"sh","nope":1}`, `unknown field "nope"`},
	} {
		w := httptest.NewRecorder()
		if _, ok := decodeRun(w, httptest.NewRequest("POST", "/v1/runs", strings.NewReader(tc.body))); ok {
			t.Errorf("%s: accepted", tc.body)
			continue
		}
		var e api.Error
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != 400 || !strings.Contains(e.Message, tc.want) || leaksGo(e.Message) {
			t.Errorf("%s: got %d %q, want 400 saying %q", tc.body, w.Code, e.Message, tc.want)
		}
	}
	// A session's exec shares the decoder.
	w := httptest.NewRecorder()
	var x api.ExecRequest
	if decodeBody(w, httptest.NewRequest("POST", "/v1/sessions/s/exec", strings.NewReader(`{"argv":{"a":"b"}}`)), &x) ||
		!strings.Contains(w.Body.String(), `\"argv\": want an array of strings, got an object`) {
		t.Errorf("exec: %d %s", w.Code, w.Body)
	}
}

// TestEnvForms checks that an environment given as an object means the
// same entries as the array form, in the order of the sorted names.
func TestEnvForms(t *testing.T) {
	for _, tc := range []struct {
		json string
		want []string
	}{
		{`["B=2","A=1"]`, []string{"B=2", "A=1"}},
		{`{"B":"2","A":"1","C":""}`, []string{"A=1", "B=2", "C="}},
		{`{"PATH":"/bin:/usr/bin","X":"a=b"}`, []string{"PATH=/bin:/usr/bin", "X=a=b"}},
		{`{}`, []string{}},
		{`[]`, []string{}},
		{`null`, nil},
	} {
		var r api.RunRequest
		if err := json.Unmarshal([]byte(`{"env":`+tc.json+`}`), &r); err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if got := []string(r.Env); !equalEnv(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.json, got, tc.want)
		}
	}
}

func equalEnv(a, b []string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
