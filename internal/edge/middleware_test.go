package edge

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestRecovererLogsThePanic: a handler's panic is answered 500 internal
// with no detail, and the daemon's log has what panicked and where: the
// caller's answer says nothing, so without the log the failure could
// not be read (a CI run's 500 on a run was not, before).
func TestRecovererLogsThePanic(t *testing.T) {
	var logs bytes.Buffer
	g := NewGuard(nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	h := g.Recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("a handler's own bug")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/runs", nil))
	var e api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != http.StatusInternalServerError || e.Code != api.CodeInternal || e.Message != "internal error" {
		t.Fatalf("answer %d %s (%v)", w.Code, w.Body, err)
	}
	for _, want := range []string{"a request's handler panicked", "path=/v1/runs", "a handler's own bug", "TestRecovererLogsThePanic"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, logs.String())
		}
	}
}
