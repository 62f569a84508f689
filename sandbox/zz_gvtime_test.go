package sandbox

import (
	"testing"
	"time"
)

func TestZZGVisorExecTiming(t *testing.T) {
	rt := testRuntime(t)
	spec := Spec{Limits: DefaultLimits(), Isolation: IsolationGVisor}
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		r := sb.Exec(t.Context(), ExecRequest{Argv: []string{"/bin/true"}, KeepAlive: true})
		ds = append(ds, time.Since(t0))
		if r.Outcome != "exited" {
			t.Fatal(r.Error)
		}
	}
	t.Logf("exec /bin/true in a created gVisor sandbox: %v", ds)
	for i := 0; i < 3; i++ {
		sb2, _ := rt.Create(t.Context(), spec)
		time.Sleep(200 * time.Millisecond)
		var ts []time.Duration
		for _, a := range [][]string{{"/bin/true"}, {"/bin/echo"}, {"/bin/true"}, {"/usr/bin/id"}, {"/bin/true"}} {
			t0 := time.Now()
			sb2.Exec(t.Context(), ExecRequest{Argv: a, KeepAlive: true})
			ts = append(ts, time.Since(t0))
		}
		t1 := time.Now()
		sb2.Destroy(t.Context())
		t.Logf("true echo true id true: %v destroy %v", ts, time.Since(t1))
	}
}
