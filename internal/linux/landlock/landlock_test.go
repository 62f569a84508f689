package landlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The restriction cannot be undone, so the test process never applies it:
// it re-executes its own binary in helper mode (selected by helperEnv) and
// the child restricts itself, probes what it may still do, and reports the
// outcome as JSON on stdout.
const (
	helperEnv  = "AIRLOCK_LANDLOCK_TEST_HELPER"
	helperDirA = "AIRLOCK_LANDLOCK_TEST_DIR_A"
	helperDirB = "AIRLOCK_LANDLOCK_TEST_DIR_B"
	helperPriv = "AIRLOCK_LANDLOCK_TEST_PRIVILEGED"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// report is what the helper prints. Probes maps a probe name to "ok" or
// the errno name of the failure.
type report struct {
	ABI         int               `json:"abi"`
	Error       string            `json:"error,omitempty"`
	MainTID     int               `json:"main_tid"`
	OtherTID    int               `json:"other_tid"`
	Probes      map[string]string `json:"probes"`
	NoNewPrivs  map[string]string `json:"no_new_privs"` // thread id -> NoNewPrivs value
	ThreadCount int               `json:"thread_count"`
}

// outcome turns an error into a probe result.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return fmt.Sprintf("exit %d", exitErr.ExitCode())
	}
	return err.Error()
}

// createFile creates (exclusively) and closes a file.
func createFile(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// openFile opens and closes a file with the given flags.
func openFile(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func helperMain() int {
	dirA, dirB := os.Getenv(helperDirA), os.Getenv(helperDirB)
	rep := report{Probes: map[string]string{}, NoNewPrivs: map[string]string{}}

	// Pin the main goroutine to its thread, and park a second goroutine
	// on another thread that exists before Restrict, to show that
	// Restrict reaches threads other than the caller's.
	runtime.LockOSThread()
	rep.MainTID = unix.Gettid()
	type job struct {
		fn   func() error
		done chan error
	}
	jobs := make(chan job)
	ready := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays ours
		ready <- unix.Gettid()
		for j := range jobs {
			j.done <- j.fn()
		}
	}()
	rep.OtherTID = <-ready
	onOther := func(fn func() error) error {
		done := make(chan error)
		jobs <- job{fn, done}
		return <-done
	}

	abi, err := Restrict(Rules{
		ReadOnly:   []string{"/"},
		ReadWrite:  []string{dirA, "/nonexistent-airlock-landlock-test", filepath.Join(dirB, "rwfile")},
		WriteFiles: []string{"/dev/null"},
		Privileged: os.Getenv(helperPriv) == "1",
	})
	rep.ABI = abi
	if err != nil {
		rep.Error = err.Error()
		return emit(rep)
	}

	p := rep.Probes
	p["create_in_a"] = outcome(createFile(filepath.Join(dirA, "new")))
	p["create_in_b"] = outcome(createFile(filepath.Join(dirB, "new")))
	p["mkdir_in_b"] = outcome(unix.Mkdir(filepath.Join(dirB, "newdir"), 0o755))
	p["write_dev_null"] = outcome(openFile("/dev/null", unix.O_WRONLY|unix.O_TRUNC))
	p["write_existing_in_b"] = outcome(openFile(filepath.Join(dirB, "existing"), unix.O_WRONLY))
	p["read_existing_in_b"] = outcome(func() error {
		b, err := os.ReadFile(filepath.Join(dirB, "existing"))
		if err == nil && string(b) != "content" {
			return fmt.Errorf("read %q", b)
		}
		return err
	}())
	p["list_b"] = outcome(func() error { _, err := os.ReadDir(dirB); return err }())
	p["write_rwfile_in_b"] = outcome(openFile(filepath.Join(dirB, "rwfile"), unix.O_WRONLY|unix.O_TRUNC))
	p["unlink_in_b"] = outcome(unix.Unlink(filepath.Join(dirB, "existing")))
	p["rename_a_to_b"] = outcome(unix.Rename(filepath.Join(dirA, "x"), filepath.Join(dirB, "x")))
	p["rename_within_a"] = outcome(unix.Rename(filepath.Join(dirA, "y"), filepath.Join(dirA, "y2")))
	p["exec_true"] = outcome(exec.Command("/bin/true").Run())
	// Commands inherit the domain: a shell may write to dirA and
	// /dev/null, but not create a file in dirB.
	p["sh_write_a_and_null"] = outcome(exec.Command("/bin/sh", "-c",
		`echo hi > "$1/from_sh" && echo hi > /dev/null`, "sh", dirA).Run())
	p["sh_create_in_b"] = outcome(exec.Command("/bin/sh", "-c",
		`echo hi > "$1/from_sh"`, "sh", dirB).Run())

	// The thread that existed before Restrict is confined too.
	p["other_thread_tid_same"] = outcome(onOther(func() error {
		if unix.Gettid() != rep.OtherTID {
			return errors.New("goroutine moved")
		}
		return nil
	}))
	p["other_thread_create_in_b"] = outcome(onOther(func() error { return createFile(filepath.Join(dirB, "other")) }))
	p["other_thread_create_in_a"] = outcome(onOther(func() error { return createFile(filepath.Join(dirA, "other")) }))
	p["other_thread_exec_create_in_b"] = outcome(onOther(func() error {
		return exec.Command("/bin/sh", "-c", `echo hi > "$1/from_other"`, "sh", dirB).Run()
	}))

	// Signals: a child started from one thread, signalled from the same
	// thread and from a different one.
	p["signal_same_thread"] = outcome(signalChild(func(f func() error) error { return f() }, func(f func() error) error { return f() }))
	p["signal_other_thread"] = outcome(signalChild(func(f func() error) error { return f() }, onOther))

	// no_new_privs must be set on every thread of the process.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		rep.Error = err.Error()
		return emit(rep)
	}
	rep.ThreadCount = len(tasks)
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "status"))
		if err != nil {
			rep.NoNewPrivs[t.Name()] = err.Error()
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok {
				rep.NoNewPrivs[t.Name()] = strings.TrimSpace(v)
			}
		}
	}
	return emit(rep)
}

// signalChild starts a sleeping child via start and sends it SIGTERM via
// send, returning the error of the signal. The child is always reaped.
func signalChild(start, send func(func() error) error) error {
	var cmd *exec.Cmd
	if err := start(func() error {
		cmd = exec.Command("/bin/sleep", "30")
		return cmd.Start()
	}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	err := send(func() error { return unix.Kill(cmd.Process.Pid, unix.SIGTERM) })
	if err != nil {
		// Clean up from the starting thread, which may signal it.
		_ = start(func() error { return cmd.Process.Kill() })
	}
	_ = cmd.Wait()
	return err
}

func emit(rep report) int {
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// allThreadsSupported reports whether this binary may use
// syscall.AllThreadsSyscall: the runtime refuses it when cgo is linked,
// which is always the case with -race.
func allThreadsSupported() bool {
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0)
	return errno != syscall.ENOTSUP
}

// helperBinary returns a test binary that can run Restrict: this one, or,
// when this one links cgo (as with -race), a copy of this package's tests
// built with CGO_ENABLED=0.
func helperBinary(t *testing.T) string {
	if allThreadsSupported() {
		return os.Args[0]
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("this test binary links cgo (for example because of -race), so it cannot run Restrict, and no go command is available to build one without cgo: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "landlock-helper.test")
	build := exec.Command(goTool, "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a cgo-free helper: %v\n%s", err, out)
	}
	return bin
}

// runHelper runs bin in helper mode on dirA and dirB and decodes its report.
func runHelper(t *testing.T, bin, dirA, dirB string, env ...string) report {
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperDirA+"="+dirA, helperDirB+"="+dirB)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	t.Logf("helper report: %s", out)
	return rep
}

// newDirs creates the two directories the helper works on, with the files
// it expects.
func newDirs(t *testing.T) (dirA, dirB string) {
	dirA, dirB = t.TempDir(), t.TempDir()
	for path, content := range map[string]string{
		filepath.Join(dirA, "x"):        "x",
		filepath.Join(dirA, "y"):        "y",
		filepath.Join(dirB, "existing"): "content",
		filepath.Join(dirB, "rwfile"):   "rw",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dirA, dirB
}

// TestRestrictRefusedWithCgo checks that a binary linking cgo gets a clear
// error and no confinement at all, rather than a confinement of one thread.
func TestRestrictRefusedWithCgo(t *testing.T) {
	if ABI() == 0 {
		t.Skip("kernel has no Landlock (landlock_create_ruleset version query failed with ENOSYS or EOPNOTSUPP)")
	}
	if allThreadsSupported() {
		t.Skip("this test binary does not link cgo; run with -race to cover the refusal")
	}
	dirA, dirB := newDirs(t)
	rep := runHelper(t, os.Args[0], dirA, dirB)
	if !strings.Contains(rep.Error, "cgo") || rep.ABI != 0 || len(rep.Probes) != 0 {
		t.Errorf("helper report %+v; want an error mentioning cgo, ABI 0 and no probes", rep)
	}
}

func TestRestrict(t *testing.T) {
	if ABI() == 0 {
		t.Skip("kernel has no Landlock (landlock_create_ruleset version query failed with ENOSYS or EOPNOTSUPP)")
	}
	t.Run("unprivileged", func(t *testing.T) { testRestrict(t, false) })
	// With CAP_SYS_ADMIN (as root here, as init in its user namespace)
	// the same confinement holds without no_new_privs.
	t.Run("privileged", func(t *testing.T) {
		if unix.Geteuid() != 0 {
			t.Skip("needs CAP_SYS_ADMIN")
		}
		testRestrict(t, true)
	})
}

func testRestrict(t *testing.T, privileged bool) {
	bin := helperBinary(t)
	dirA, dirB := newDirs(t)
	var env []string
	if privileged {
		env = append(env, helperPriv+"=1")
	}
	rep := runHelper(t, bin, dirA, dirB, env...)
	if rep.Error != "" {
		t.Fatalf("helper: %s", rep.Error)
	}
	if want := min(ABI(), maxABI); rep.ABI != want {
		t.Errorf("Restrict returned ABI %d; want %d", rep.ABI, want)
	}
	if rep.MainTID == rep.OtherTID {
		t.Errorf("main and other goroutine share thread %d", rep.MainTID)
	}

	denied := "EACCES"
	want := map[string]string{
		"create_in_a":                   "ok",
		"create_in_b":                   denied,
		"mkdir_in_b":                    denied,
		"write_dev_null":                "ok",
		"write_existing_in_b":           denied,
		"read_existing_in_b":            "ok",
		"list_b":                        "ok",
		"write_rwfile_in_b":             "ok",
		"unlink_in_b":                   denied,
		"rename_within_a":               "ok",
		"exec_true":                     "ok",
		"sh_write_a_and_null":           "ok",
		"sh_create_in_b":                "exit 2",
		"other_thread_tid_same":         "ok",
		"other_thread_create_in_b":      denied,
		"other_thread_create_in_a":      "ok",
		"other_thread_exec_create_in_b": "exit 2",
		"signal_same_thread":            "ok",
	}
	for probe, w := range want {
		if got := rep.Probes[probe]; got != w {
			t.Errorf("probe %s = %q; want %q", probe, got, w)
		}
	}
	// Each thread gets its own domain (see Restrict), so with the signal
	// scope a child started from one thread cannot be signalled from
	// another. Pin that documented behaviour.
	wantSignal := "ok"
	if rep.ABI >= 6 && errata()&erratumSignalScope != 0 {
		wantSignal = "EPERM"
	}
	if got := rep.Probes["signal_other_thread"]; got != wantSignal {
		t.Errorf("probe signal_other_thread = %q; want %q", got, wantSignal)
	}
	// Renaming into another hierarchy is refused either for lack of
	// rights in the destination (EACCES) or for reparenting (EXDEV).
	if got := rep.Probes["rename_a_to_b"]; got != "EACCES" && got != "EXDEV" {
		t.Errorf("probe rename_a_to_b = %q; want EACCES or EXDEV", got)
	}

	// Check from the host side that the denied operations had no effect
	// and the allowed ones did.
	for _, p := range []string{
		filepath.Join(dirB, "new"), filepath.Join(dirB, "newdir"), filepath.Join(dirB, "x"),
		filepath.Join(dirB, "from_sh"), filepath.Join(dirB, "other"), filepath.Join(dirB, "from_other"),
	} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a denied operation (err=%v)", p, err)
		}
	}
	for _, p := range []string{
		filepath.Join(dirA, "new"), filepath.Join(dirA, "x"), filepath.Join(dirA, "y2"),
		filepath.Join(dirA, "from_sh"), filepath.Join(dirA, "other"), filepath.Join(dirB, "existing"),
	} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dirB, "existing")); err != nil || string(b) != "content" {
		t.Errorf("dirB/existing = %q, %v; want it unchanged", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dirB, "rwfile")); err != nil || len(b) != 0 {
		t.Errorf("dirB/rwfile = %q, %v; want it truncated by the helper", b, err)
	}

	if rep.ThreadCount < 2 || len(rep.NoNewPrivs) != rep.ThreadCount {
		t.Errorf("helper saw %d threads, no_new_privs for %d", rep.ThreadCount, len(rep.NoNewPrivs))
	}
	wantNNP := "1"
	if privileged {
		wantNNP = "0" // Privileged leaves no_new_privs alone
	}
	for tid, v := range rep.NoNewPrivs {
		if v != wantNNP {
			t.Errorf("thread %s: NoNewPrivs %q; want %s", tid, v, wantNNP)
		}
	}
}

func TestHandledAccessFS(t *testing.T) {
	v1 := uint64(1<<13 - 1)
	tests := []struct {
		abi  int
		want uint64
	}{
		{0, 0},
		{1, v1},
		{2, v1 | accessRefer},
		{3, v1 | accessRefer | accessTruncate},
		{4, v1 | accessRefer | accessTruncate},
		{5, v1 | accessRefer | accessTruncate | accessIoctlDev},
		{6, 1<<16 - 1},
		{7, 1<<16 - 1},
	}
	for _, tt := range tests {
		if got := handledAccessFS(tt.abi); got != tt.want {
			t.Errorf("handledAccessFS(%d) = %#x; want %#x", tt.abi, got, tt.want)
		}
	}
	if accessFile&^handledAccessFS(maxABI) != 0 {
		t.Errorf("accessFile %#x has rights outside ABI %d", accessFile, maxABI)
	}
}

func TestRulesCheck(t *testing.T) {
	for _, r := range []Rules{
		{ReadOnly: []string{""}},
		{ReadWrite: []string{"relative/dir"}},
		{WriteFiles: []string{"dev/null"}},
	} {
		if err := r.check(); err == nil {
			t.Errorf("%+v: check() = nil; want an error", r)
		}
	}
	if err := (Rules{ReadOnly: []string{"/"}, ReadWrite: []string{"/tmp"}, WriteFiles: []string{"/dev/null"}}).check(); err != nil {
		t.Errorf("check() = %v; want nil", err)
	}
}

func TestABI(t *testing.T) {
	abi := ABI()
	t.Logf("kernel Landlock ABI: %d (errata %#x)", abi, errata())
	if abi < 0 {
		t.Errorf("ABI() = %d", abi)
	}
}
