package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"path"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// FuzzDecodeRun feeds arbitrary bodies to the run request parser: it must
// never panic, and either accept a request that passes every check or
// answer 4xx with a JSON error.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte(`{"tool":"sh","argv":["true"]}`))
	f.Add([]byte(`{"tool":"sh","argv":["sh","-c","echo"],"env":["A=b"],"workdir":"/tmp","stdin":"x"}`))
	f.Add([]byte(`{"tool":"","argv":[]}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"tool":"sh","argv":["true"]}{}`))
	f.Add([]byte(`{"tool":"sh","argv":["true"],"env":{"B":"2","A":"1"}}`))
	f.Add([]byte(`{"tool":"sh","argv":["true"],"env":{"A":1}}`))
	f.Add([]byte(`{"tool":"sh","argv":"true","tty":{"rows":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/runs", bytes.NewReader(body))
		req, ok := decodeRun(w, r)
		if ok {
			if req.Tool == "" || len(req.Argv) == 0 || req.Argv[0] == "" || (req.Workdir != "" && !path.IsAbs(req.Workdir)) {
				t.Fatalf("accepted %+v", req)
			}
			return
		}
		if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("refusal with status %d", w.Code)
		}
		var e api.Error
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("refusal body %q: %v", w.Body.String(), err)
		}
		if leaksGo(e.Message) {
			t.Fatalf("refusal %q names Go's types", e.Message)
		}
	})
}

// FuzzAuditQuery feeds arbitrary query strings to GET /v1/audit's
// parser: it never panics, and what it accepts is within bounds.
func FuzzAuditQuery(f *testing.F) {
	f.Add("kind=sandbox&tool=sh&limit=10")
	f.Add("after=5&wait=30s")
	f.Add("since=15m&until=2026-01-02T15:04:05Z&tail=true")
	f.Add("decision=deny&client=token:ci&run=r_1&session=s_1&sandbox=ab")
	f.Add("limit=-1&after=99999999999999999999&wait=-1s")
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, wait, err := parseAuditQuery(v, time.Unix(1e9, 0))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if q.After < 0 || q.Limit < 0 || q.Limit > 1000 || wait < 0 || wait > maxWait || (q.Tail && wait > 0) {
			t.Fatalf("accepted %+v wait %v", q, wait)
		}
	})
}
