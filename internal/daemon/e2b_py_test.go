package daemon

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// TestE2BPythonSDK drives the daemon's E2B API with the official Python
// SDK (e2b, as pinned by the test script), unchanged, through both its
// clients, Sandbox and AsyncSandbox: what TestE2BSDK and TestE2BSDKCompat
// do with the JS SDK (create, commands, stdin, files, signed URLs, watch,
// pty, list, metrics, connect, kill, a breach, a wrong key, an unknown
// template), and a create that narrows the tool's egress. The cases are
// pytest's (testdata/pysdk): what one fails is in its output. Where
// airlock answers otherwise than E2B's cloud, the case asserts E2B's
// answer and is marked xfail with the difference.
func TestE2BPythonSDK(t *testing.T) {
	testE2BPythonSDK(t, "")
}

// TestE2BPythonSDKGVisor is TestE2BPythonSDK with every tool of the
// config on the gvisor backend (AIRLOCK_TEST_E2B_ISOLATION tells the
// cases, which then expect what gVisor refuses by name to be refused).
func TestE2BPythonSDKGVisor(t *testing.T) {
	clientsNotRaced(t)
	e2bPython(t)
	runsc := testutil.Runsc(t)
	testE2BPythonSDK(t, runsc)
}

// testE2BPythonSDK runs the SDK's cases; with runsc set, on gVisor.
func testE2BPythonSDK(t *testing.T, runsc string) {
	clientsNotRaced(t)
	py := e2bPython(t)
	isolatednet.Require(t)
	iso := ""
	if runsc != "" {
		iso = "    isolation: gvisor\n"
	}
	// Two names of one upstream on loopback, both the tool net's
	// destinations, for the creates that narrow its egress.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s\n", strings.Split(r.Host, ":")[0])
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	_, base := serveE2BDaemonOn(t, fmt.Sprintf(`  net:
%s    egress:
      - {host: a.test, ports: [%d], addresses: [127.0.0.1], private: true}
      - {host: b.test, ports: [%d], addresses: [127.0.0.1], private: true}
`, iso, port, port), nil, runsc)
	// No cache and no bytecode: pytest writes nothing into the module.
	cmd := exec.CommandContext(t.Context(), py, "-m", "pytest", "-q", "-rxXs", "-p", "no:cacheprovider", "testdata/pysdk")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey, "E2B_OTHER_KEY=other-0123456789abcdef", "E2B_VOLUME_API_URL="+base,
		"AIRLOCK_TEST_NET_PORT="+strconv.Itoa(port), "AIRLOCK_TEST_E2B_ISOLATION="+strings.TrimSpace(strings.TrimPrefix(iso, "    isolation:")))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Logf("pytest:\n%s", out)
}
