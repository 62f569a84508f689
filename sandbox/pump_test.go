package sandbox

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/result"
)

// TestPumpReadsPastTheDeadline: output written before drain gave up is
// delivered even when the pump reaches it after the deadline was set (a
// loaded host); a writer still holding the pipe open is not waited for.
// Before, the poller's deadline check dropped it, and a command that
// printed was seen to print nothing.
func TestPumpReadsPastTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   string
		closed bool // the writer's end closed (the command and all it started ended)
	}{
		{"writer gone", "Python 3.11.2\n", true},
		{"writer still there", "partial\n", false},
		{"more than one read", strings.Repeat("x", 60<<10), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			go func() {
				_, _ = w.WriteString(tc.data)
				if tc.closed {
					w.Close()
				}
			}()
			// The drain's deadline, set before the pump has run.
			time.Sleep(20 * time.Millisecond)
			if err := r.SetReadDeadline(time.Now()); err != nil {
				t.Fatal(err)
			}
			o := &outputCounter{x: &execution{req: ExecRequest{Capture: true}}, limit: 1 << 30}
			done := make(chan struct{})
			go func() { o.pump(r, result.EventStdout, nil); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the pump waited for the writer")
			}
			if string(o.stdout) != tc.data {
				t.Errorf("delivered %d bytes, want %d", len(o.stdout), len(tc.data))
			}
		})
	}
}
