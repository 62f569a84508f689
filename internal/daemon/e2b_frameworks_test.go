package daemon

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// pyAgents is the Python of the virtualenv that holds the OpenAI Agents
// SDK with its E2B extra (AIRLOCK_TEST_PY_AGENTS, which the test script
// sets). It has a virtualenv of its own: the extra pins the E2B SDKs
// (e2b 2.31.0, e2b-code-interpreter 2.8.1) below AIRLOCK_TEST_PY's.
func pyAgents(t *testing.T) string {
	t.Helper()
	py := os.Getenv("AIRLOCK_TEST_PY_AGENTS")
	if py == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_PY_AGENTS is not set (the test script makes the OpenAI Agents SDK's virtualenv)")
		}
		t.Skip("AIRLOCK_TEST_PY_AGENTS is not set (scripts/test makes the OpenAI Agents SDK's virtualenv)")
	}
	if err := exec.Command(py, "-c", "import agents.extensions.sandbox.e2b, e2b, pytest").Run(); err != nil {
		t.Fatalf("AIRLOCK_TEST_PY_AGENTS=%s cannot import the SDK: %v", py, err)
	}
	return py
}

// TestE2BPythonFrameworks runs Python agent frameworks through their own
// E2B integrations, installed pinned, against the daemon: the OpenAI
// Agents SDK's E2B sandbox client, langchain-e2b's Deep Agents backend
// and Agno's E2BTools. Only each agent's model is scripted (no model
// service is reachable from a test); the framework creates the sandbox
// (langchain-e2b's backend is given one the test creates), runs a
// command or code in it through the E2B SDK, and ends it. The
// cases are pytest's (testdata/pyframeworks): what one fails is in its
// output. The frameworks create sandboxes of E2B's two default
// templates, base (the e2b SDK's) and code-interpreter-v1 (the code
// interpreter's), which name two tools here.
func TestE2BPythonFrameworks(t *testing.T) {
	needKernel(t)
	clientsNotRaced(t)
	isolatednet.Require(t)
	base := serveE2B(t, "  code-interpreter-v1: {}\n  shell: {e2b_templates: [base]}\n")
	for _, c := range []struct {
		name  string
		py    func(*testing.T) string
		files []string
	}{
		{"openai-agents", pyAgents, []string{"testdata/pyframeworks/test_openai_agents.py"}},
		{"langchain-agno", pyFrameworks, []string{"testdata/pyframeworks/test_langchain_e2b.py", "testdata/pyframeworks/test_agno.py"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			py := c.py(t)
			// No cache and no bytecode: pytest writes nothing into the
			// module; HOME is the test's, for what a framework keeps
			// there.
			args := append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-rxXs"}, c.files...)
			cmd := exec.CommandContext(t.Context(), py, args...)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "HOME="+t.TempDir(),
				"E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+e2bKey)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("pytest: %v\n%s", err, out)
			}
			t.Logf("pytest:\n%s", out)
			// Each framework ended its sandboxes when its run was over.
			req, _ := http.NewRequest("GET", base+"/v2/sandboxes", nil)
			req.Header.Set("X-API-KEY", e2bKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); string(bytes.TrimSpace(b)) != "[]" {
				t.Errorf("sandboxes left after the run: %s", b)
			}
		})
	}
}

// pyFrameworks is AIRLOCK_TEST_PY (e2bPython), which holds langchain-e2b
// and Agno beside the E2B SDKs.
func pyFrameworks(t *testing.T) string {
	t.Helper()
	py := e2bPython(t)
	if err := exec.Command(py, "-c", "import langchain_e2b, agno.tools.e2b").Run(); err != nil {
		t.Fatalf("AIRLOCK_TEST_PY=%s cannot import langchain-e2b and agno: %v", py, err)
	}
	return py
}
