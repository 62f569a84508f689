package sandbox

import (
	"testing"
	"time"
)

func TestZZGVisorCreateTiming(t *testing.T) {
	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits(), Isolation: IsolationGVisor}
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		sb, err := rt.Start(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := sb.AwaitStart(t.Context()); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/true"}})
		t3 := time.Now()
		sb.Destroy(t.Context())
		t.Logf("start %v ready %v exec %v destroy %v", t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), time.Since(t3))
	}
}
