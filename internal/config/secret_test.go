package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// secretValue is a value no error message may contain, in whole or in
// part.
const secretValue = "s3cr3t-VALUE"

func TestSecretReadEnv(t *testing.T) {
	const name = "AIRLOCK_TEST_SECRET"
	tests := []struct {
		name    string
		set     bool
		value   string
		want    string
		wantErr string
	}{
		{"set", true, secretValue, secretValue, ""},
		{"kept as is", true, " " + secretValue + "\t", " " + secretValue + "\t", ""},
		{"unset", false, "", "", `secret "gh": environment variable AIRLOCK_TEST_SECRET is not set`},
		{"empty", true, "", "", `secret "gh": environment variable AIRLOCK_TEST_SECRET is empty`},
		{"newline", true, secretValue + "\n", "", `secret "gh": environment variable AIRLOCK_TEST_SECRET holds a line break or other control character`},
		{"carriage return", true, secretValue + "\rX-Evil: 1", "", "holds a line break"},
		{"escape", true, secretValue + "\x1b", "", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(name, tt.value)
			if !tt.set {
				os.Unsetenv(name) // t.Setenv restores it after the test
			}
			s := &Secret{Name: "gh", Env: name}
			got, err := s.Read()
			checkRead(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestSecretReadFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		want    string
		wantErr string
	}{
		{"plain", secretValue, secretValue, ""},
		{"newline", secretValue + "\n", secretValue, ""},
		{"crlf", secretValue + "\r\n", secretValue, ""},
		{"spaces kept", " " + secretValue + " \n", " " + secretValue + " ", ""},
		{"two newlines", secretValue + "\n\n", "", "holds a line break"},
		{"lone cr", secretValue + "\r", "", "holds a line break"},
		{"two lines", secretValue + "\n" + secretValue + "\n", "", "holds a line break"},
		{"nul", secretValue + "\x00", "", "control character"},
		{"empty", "", "", "is empty"},
		{"only newline", "\n", "", "is empty"},
		{"only crlf", "\r\n", "", "is empty"},
		{"largest", strings.Repeat("s", MaxSecretSize), strings.Repeat("s", MaxSecretSize), ""},
		{"too large", strings.Repeat("s", MaxSecretSize+1), "", "is larger than 64 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := &Secret{Name: "gh", File: path}
			got, err := s.Read()
			checkRead(t, got, err, tt.want, tt.wantErr)
			if err != nil && !strings.Contains(err.Error(), `secret "gh": file `+path) {
				t.Errorf("Read error = %q; want it to name the secret and the file", err)
			}
		})
	}
}

func TestSecretReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	_, err := (&Secret{Name: "gh", File: missing}).Read()
	if want := `secret "gh": cannot read file ` + missing + ": stat " + missing + ": "; err == nil || !strings.HasPrefix(err.Error(), want) ||
		!errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrSecret) {
		t.Errorf("Read(missing) error = %v; want %q... matching fs.ErrNotExist and ErrSecret", err, want)
	}

	// A directory, like a FIFO or a device, is not read at all.
	_, err = (&Secret{Name: "gh", File: dir}).Read()
	if want := `secret "gh": cannot read file ` + dir + ": read " + dir + ": not a regular file"; err == nil || err.Error() != want || !errors.Is(err, ErrSecret) {
		t.Errorf("Read(directory) error = %v; want %q", err, want)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Secret{Name: "gh", File: fifo}).Read(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Read(fifo) error = %v; want it refused without blocking", err)
	}

	// The value is read at each call, so a rotated secret is picked up.
	path := filepath.Join(dir, "rotating")
	for _, v := range []string{"one", "two"} {
		if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := (&Secret{Name: "gh", File: path}).Read(); err != nil || got != v {
			t.Errorf("Read = %q, %v; want %q", got, err, v)
		}
	}

	_, err = (&Secret{Name: "gh"}).Read()
	if err == nil || !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), `secret "gh": no source`) {
		t.Errorf("Read(no source) error = %v; want an ErrSecret naming the secret", err)
	}
}

// checkRead checks the result of Read, and that an error is a
// *SecretError matching ErrSecret without the secret's value in its text.
func checkRead(t *testing.T, got string, err error, want, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil || got != want {
			t.Errorf("Read = %.40q, %v; want %.40q, nil", got, err, want)
		}
		return
	}
	if err == nil {
		t.Fatalf("Read = %.40q, nil; want an error containing %q", got, wantErr)
	}
	var se *SecretError
	if !errors.As(err, &se) || se.Secret != "gh" || !errors.Is(err, ErrSecret) || errors.Is(err, ErrInvalid) {
		t.Errorf("Read error %v (%T) is not a *SecretError for gh matching ErrSecret", err, err)
	}
	if got != "" {
		t.Errorf("Read returned %.40q with error %v; want \"\"", got, err)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("Read error = %q; want it to contain %q", err, wantErr)
	}
	// Any 4 bytes of the value would be a leak.
	for i := 0; i+4 <= len(secretValue); i++ {
		if strings.Contains(err.Error(), secretValue[i:i+4]) {
			t.Errorf("Read error %q contains part of the secret (%q)", err, secretValue[i:i+4])
		}
	}
}
