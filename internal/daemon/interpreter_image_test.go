package daemon

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/e2b"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/testutil/isolatednet"
)

// interpImage is the code interpreter's image that scripts/interpreter-image
// builds, as a root file system tarball; scripts/test builds it once and
// names it in AIRLOCK_TEST_INTERP_IMAGE.
func interpImage(t *testing.T) string {
	t.Helper()
	p := os.Getenv("AIRLOCK_TEST_INTERP_IMAGE")
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AIRLOCK_TEST_INTERP_IMAGE is not set (scripts/test builds the interpreter's image)")
		}
		t.Skip("AIRLOCK_TEST_INTERP_IMAGE is not set (scripts/interpreter-image builds the image; scripts/test builds it once and sets it)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("AIRLOCK_TEST_INTERP_IMAGE: %v", err)
	}
	return p
}

// TestInterpreterImage: the image scripts/interpreter-image builds,
// imported as a root file system and named by the tool the E2B SDKs
// create by default (code-interpreter-v1), serves runCode from its own
// Python, not the host's: print and the main result, a matplotlib figure
// as a PNG whose fonts come from the list built into the image (not
// scanned again), a DataFrame as its data and HTML, and a bash context.
// Then the official SDK's script, when the SDK is installed.
func TestInterpreterImage(t *testing.T) {
	clientsNotRaced(t)
	tarball := interpImage(t)
	st := testImageStore(t)
	start := time.Now()
	imp, err := st.Import(t.Context(), tarball, image.ImportOptions{Name: "code-interpreter:test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %s (%s) in %v", imp.Digest, tarball, time.Since(start).Round(time.Millisecond))
	// E2B's conventions: the image's user is user, its home /home/user,
	// which the writable root lets it write, the working directory.
	base := serveE2B(t, "  code-interpreter-v1: {image: code-interpreter:test, rootfs: writable, workdir: /home/user, env: {HOME: /home/user}}\nimages:\n  store: "+st.Dir()+"\n")
	sb := e2bCreateOf(t, base, "code-interpreter-v1")
	run := func(body string) string {
		t.Helper()
		status, lines := execute(t, base, sb, body)
		if status != 200 {
			t.Fatalf("%s: %d %v", body, status, lines)
		}
		return lineKinds(lines)
	}
	// The kernel's Python is the image's: the module and the font list
	// only the image has (the .pth that loads the module is the
	// image's too), and no matplotlib yet.
	if got, want := run(`{"code":"import os, sys\nsys.executable, '_airlock_matplotlib_fontcache' in sys.modules, os.listdir('/var/cache/matplotlib'), 'matplotlib' in sys.modules"}`),
		"number_of_executions=1 result=('/usr/bin/python3', True, ['fontlist-v330.json'], False) end_of_execution"; got != want {
		t.Fatalf("the kernel's Python: %s, want %s", got, want)
	}
	if got, want := run(`{"code":"print('hi')\n6 * 7"}`), "number_of_executions=2 stdout=hi result=42 end_of_execution"; got != want {
		t.Errorf("print and the main result: %s, want %s", got, want)
	}
	e2bConventions(t, base, sb, run)
	// The first figure, timed; matplotlib's log says whether it scanned
	// the fonts ("generated new fontManager").
	fig := `{"code":"import logging\nsaid = []\nclass Said(logging.Handler):\n    def emit(self, r): said.append(r.getMessage())\nfm = logging.getLogger('matplotlib.font_manager')\nfm.addHandler(Said()); fm.setLevel(logging.INFO)\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()"}`
	start = time.Now()
	status, lines := execute(t, base, sb, fig)
	took := time.Since(start)
	png := ""
	for _, l := range lines {
		if l["type"] == "result" {
			png = str(l["png"])
		}
	}
	if status != 200 || !strings.HasPrefix(png, "iVBORw0K") {
		t.Errorf("the figure: %d %s, no PNG", status, lineKinds(lines))
	}
	t.Logf("the first figure (import matplotlib.pyplot, plot, show) took %v", took.Round(time.Millisecond))
	if got, want := run(`{"code":"said, os.path.isfile(os.path.expanduser('~/.cache/matplotlib/fontlist-v330.json'))"}`),
		"number_of_executions=6 result=([], True) end_of_execution"; got != want {
		t.Errorf("matplotlib's font list: %s, want %s (nothing logged: read, not generated)", got, want)
	}
	_, lines = execute(t, base, sb, `{"code":"import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"}`)
	var df map[string]any
	for _, l := range lines {
		if l["type"] == "result" {
			df = l
		}
	}
	if data := jsonText(df["data"]); data != `{"a":[1,2],"b":["x","y"]}` || !strings.Contains(str(df["html"]), "<table") {
		t.Errorf("the DataFrame: data %s, html %.80q", data, str(df["html"]))
	}
	// One line, one write: a bash's output comes in as many chunks as
	// it was written in.
	if got, want := run(`{"code":"echo hi $(ls /var/cache/matplotlib)","language":"bash"}`), "number_of_executions=1 stdout=hi fontlist-v330.json end_of_execution"; got != want {
		t.Errorf("bash: %s, want %s", got, want)
	}
	// The official SDK's own run (its default template is the tool's).
	if os.Getenv("AIRLOCK_TEST_E2B_MODULES") != "" {
		sdk := e2bInterpreterSDK(t)
		isolatednet.Require(t)
		runInterpreterSDK(t, sdk, base)
	}
}

// e2bConventions checks E2B's conventions in a sandbox of the image with a
// writable root: the user user, its home /home/user the working
// directory; the files API reaches the home (by a relative path too, as
// E2B's does), /tmp, and the rest of the writable root, as the user, and
// nothing below another mount (/proc, /dev) or through a symlink.
func e2bConventions(t *testing.T, base string, sb e2b.Sandbox, run func(string) string) {
	t.Helper()
	if got, want := run(`{"code":"import pwd\nos.getcwd(), pwd.getpwuid(os.getuid()).pw_name, os.environ['HOME']"}`),
		"number_of_executions=3 result=('/home/user', 'user', '/home/user') end_of_execution"; got != want {
		t.Errorf("the user and home: %s, want %s", got, want)
	}
	call := func(method, p, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/files?path="+url.QueryEscape(p), strings.NewReader(body))
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := call("POST", "data.csv", "a,b\n1,2\n"); status != 200 || !strings.Contains(body, `"/home/user/data.csv"`) {
		t.Errorf("write data.csv (relative: the home): %d %s", status, body)
	}
	if status, body := call("POST", "/var/tmp/x.txt", "into the root"); status != 200 {
		t.Errorf("write into the writable root: %d %s", status, body)
	}
	if status, body := call("GET", "/home/user/data.csv", ""); status != 200 || body != "a,b\n1,2\n" {
		t.Errorf("read /home/user/data.csv: %d %q", status, body)
	}
	_, lines := execute(t, base, sb, `{"code":"import os\nos.symlink('/proc/1/environ', 'env')\nopen('data.csv').read(), open('/var/tmp/x.txt').read(), os.stat('/var/tmp/x.txt').st_uid"}`)
	if got := lineKinds(lines); got != `number_of_executions=4 result=('a,b\n1,2\n', 'into the root', 1000) end_of_execution` {
		t.Errorf("the code's view of what the files API wrote: %s", got)
	}
	for _, p := range []string{"env", "/proc/1/environ", "/proc/self/status", "/dev/null", "/etc/shadow", "/home/user/../../proc/1/environ"} {
		if status, body := call("GET", p, ""); status == 200 {
			t.Errorf("read %s: %d %.80q, want a refusal", p, status, body)
		}
	}
	if status, _ := call("POST", "/etc/passwd", "root::0:0::/:/bin/sh\n"); status == 200 {
		t.Error("the files API wrote /etc/passwd, which the user may not")
	}
}
