package gvisor

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestExitFromLog(t *testing.T) {
	tests := []struct {
		name    string
		log     string
		status  uint32
		failure string
		ok      bool
	}{
		{"exit 3", "I1207 19:30:00.1   1 cli.go:100] Args: [runsc run x]\nI1207 19:30:00.2   1 cli.go:317] Exiting with status: 768\n", 768, "", true},
		{"SIGTERM", "I1207 19:30:00.2   1 cli.go:317] Exiting with status: 15\n", 15, "", true},
		{"no newline at the end", "I1207 19:30:00.2   1 cli.go:317] Exiting with status: 0", 0, "", true},
		{"failed", "W1207 19:30:00.2   1 util.go:107] FATAL ERROR: running container: starting container: boom\nW1207 19:30:00.3   1 cli.go:327] Failure to execute command, err: 1\n", 0, "running container: starting container: boom", false},
		{"last fatal error wins", "W1 x] FATAL ERROR: first\nW1 x] FATAL ERROR: second\n", 0, "second", false},
		{"nothing", "", 0, "", false},
		{"garbage status", "I1 x] Exiting with status: lots\n", 0, "", false},
		{"status too large", "I1 x] Exiting with status: 4294967296\n", 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, failure, ok := ExitFromLog([]byte(tt.log))
			if status != tt.status || failure != tt.failure || ok != tt.ok {
				t.Fatalf("got %d %q %v, want %d %q %v", status, failure, ok, tt.status, tt.failure, tt.ok)
			}
		})
	}
}

func TestStartErrno(t *testing.T) {
	tests := []struct {
		failure string
		want    unix.Errno
	}{
		{`running container: starting container: starting root container: error finding executable "nope" in PATH [/usr/bin /bin]: no such file or directory`, unix.ENOENT},
		{`error finding executable "x" in PATH [/bin]: permission denied`, unix.EACCES},
		{"running container: creating container: cannot read client sync file: EOF", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := StartErrno(tt.failure); got != tt.want {
			t.Errorf("StartErrno(%q) = %v, want %v", tt.failure, got, tt.want)
		}
	}
}

func FuzzExitFromLog(f *testing.F) {
	f.Add([]byte("I1 x] Exiting with status: 256\n"))
	f.Add([]byte("W1 x] FATAL ERROR: running container: error finding executable \"a\": no such file or directory\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		status, failure, ok := ExitFromLog(log)
		if ok && failure != "" {
			t.Fatalf("both a status (%d) and a failure (%q)", status, failure)
		}
		if !ok && status != 0 {
			t.Fatalf("status %d without ok", status)
		}
		_ = StartErrno(failure)
	})
}
