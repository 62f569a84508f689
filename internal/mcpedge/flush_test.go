package mcpedge

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// failingFlush is a server's writer whose flush fails, as a stalled
// caller's does once its write deadline passes.
type failingFlush struct {
	*httptest.ResponseRecorder
	err error
}

func (f failingFlush) FlushError() error { return f.err }

// TestWrappersPassFlushFailures: the writer the MCP edge wraps a
// handler's answer in passes a failed flush on (the audit wrapper's is
// checked in package edge). A stream's writer learns
// from it that its caller stopped reading (eventWriter); swallowed, a
// small event whose write failed in the flush passed for one sent, and
// the command's end was put down to a caller gone rather than one that
// stopped reading (TestStalledReaderDoesNotHoldTheCommand, seen in CI).
func TestWrappersPassFlushFailures(t *testing.T) {
	stalled := errors.New("write deadline exceeded")
	for _, tt := range []struct {
		name string
		wrap func(http.ResponseWriter) http.ResponseWriter
	}{
		{"mcp session", func(w http.ResponseWriter) http.ResponseWriter {
			return &sessionWriter{ResponseWriter: w, opened: func(string) {}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.wrap(failingFlush{httptest.NewRecorder(), stalled})
			if err := http.NewResponseController(w).Flush(); !errors.Is(err, stalled) {
				t.Errorf("a failed flush through the wrapper: %v, want %v", err, stalled)
			}
			ok := tt.wrap(httptest.NewRecorder())
			if err := http.NewResponseController(ok).Flush(); err != nil {
				t.Errorf("a flush that succeeds: %v", err)
			}
		})
	}
}
