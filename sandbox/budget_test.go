package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// TestBudget: a runtime with a budget refuses the sandbox that would
// exceed it, with ErrCapacity naming what is spent, until a live one is
// destroyed; a sandbox that could never fit is invalid.
func TestBudget(t *testing.T) {
	testRuntime(t)
	// A budget is also the shared test parent's own ceiling: lifted
	// again for the tests after this one.
	defer func() {
		if err := testRuntime(t).cg.SetCeiling(-1, -1); err != nil {
			t.Error(err)
		}
	}()
	l := DefaultLimits()
	l.Memory = 64 << 20
	tests := []struct {
		name   string
		budget Budget
		fits   int
	}{
		{"sandboxes", Budget{Sandboxes: 2}, 2},
		{"memory", Budget{Memory: 3 * 64 << 20}, 3},
		{"pids", Budget{Pids: 2*l.Pids + 1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Budget: tt.budget})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			var live []*Sandbox
			defer func() {
				for _, sb := range live {
					sb.Destroy(context.Background())
				}
			}()
			for range tt.fits {
				sb, err := rt.Create(t.Context(), Spec{Limits: l})
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, sb)
			}
			if u := rt.Usage(); u.Sandboxes != tt.fits || u.Memory != int64(tt.fits)*l.Memory || u.Pids != int64(tt.fits)*l.Pids {
				t.Fatalf("usage %+v with %d live", u, tt.fits)
			}
			if _, err := rt.Start(t.Context(), Spec{Limits: l}); !errors.Is(err, ErrCapacity) {
				t.Fatalf("one more: %v, want ErrCapacity", err)
			} else {
				t.Log(err)
			}
			if err := live[0].Destroy(t.Context()); err != nil {
				t.Fatal(err)
			}
			sb, err := rt.Create(t.Context(), Spec{Limits: l})
			if err != nil {
				t.Fatalf("after a destroy: %v", err)
			}
			live[0] = sb
		})
	}
	t.Run("never fits", func(t *testing.T) {
		rt, err := New(t.Context(), Options{StateDir: testStateDir, CgroupParent: testCgroup, InitPath: testutil.InitPath(t), Budget: Budget{Memory: 32 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if _, err := rt.Create(t.Context(), Spec{Limits: l}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a 64 MiB sandbox under a 32 MiB budget: %v, want ErrInvalid", err)
		}
		if u := rt.Usage(); u != (Usage{}) {
			t.Fatalf("a refused sandbox left usage %+v", u)
		}
	})
}
