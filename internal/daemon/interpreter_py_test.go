package daemon

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// e2bPython is the Python of the virtualenv that holds E2B's Python SDKs
// and the agent frameworks that run on them: smolagents, langchain-e2b
// and Agno (AIRLOCK_TEST_PY, which the test script sets). Unset,
// the test skips, except in CI, where the script always makes it.
func e2bPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("AIRLOCK_TEST_PY")
	if py == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_PY is not set (the test script makes the E2B Python SDKs' virtualenv)")
		}
		t.Skip("AIRLOCK_TEST_PY is not set (scripts/test makes the E2B Python SDKs' virtualenv)")
	}
	if err := exec.Command(py, "-c", "import e2b_code_interpreter, smolagents, pytest").Run(); err != nil {
		t.Fatalf("AIRLOCK_TEST_PY=%s cannot import the SDKs: %v", py, err)
	}
	return py
}

// TestInterpreterPythonSDK drives the code interpreter with the official
// e2b-code-interpreter Python SDK, unchanged, through both its clients
// (Sandbox and AsyncSandbox), and runs a smolagents CodeAgent whose code
// goes through the SDK (its E2B executor), only the model scripted. The
// cases are pytest's (testdata/py): what one fails is in its output.
func TestInterpreterPythonSDK(t *testing.T) {
	needKernel(t)
	clientsNotRaced(t)
	py := e2bPython(t)
	isolatednet.Require(t)
	base := serveE2B(t, "  code-interpreter-v1: {}\n")
	// No cache and no bytecode: pytest writes nothing into the module.
	cmd := exec.CommandContext(t.Context(), py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/py")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Logf("pytest:\n%s", out)
}
