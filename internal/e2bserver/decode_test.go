package e2bserver

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDecodeDescribes: the control plane describes a body that is not
// the call's JSON in the caller's terms (the field, the shape it wants
// and what came), never in Go's, as every edge does (httpx.JSONBody).
func TestDecodeDescribes(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"timeout":"soon"}`, `\"timeout\": want an integer, got a string`},
		{`{"timeout":1} {}`, `more than one value`},
		{`{"timeout":`, `the JSON ends before its value does`},
	} {
		var cr struct {
			Timeout *int `json:"timeout"`
		}
		err := e2bDecode(httptest.NewRequest("POST", "/sandboxes", bytes.NewReader([]byte(tc.body))), &cr)
		if err == nil {
			t.Errorf("%s: decoded, want a refusal", tc.body)
			continue
		}
		w := httptest.NewRecorder()
		writeAPIError(w, err)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tc.want) || strings.Contains(w.Body.String(), "Go ") || strings.Contains(w.Body.String(), "*int") {
			t.Errorf("%s: %d %s, want 400 saying %s", tc.body, w.Code, w.Body, tc.want)
		}
	}
	// An empty body is no fields.
	var cr struct{ Timeout *int }
	if err := e2bDecode(httptest.NewRequest("POST", "/sandboxes", strings.NewReader(" \n")), &cr); err != nil || cr.Timeout != nil {
		t.Errorf("empty body: %v", err)
	}
}
