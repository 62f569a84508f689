package daemon

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"path"
	"testing"

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
	})
}
