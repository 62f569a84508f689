package e2b

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTimestamp(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, ""},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "2026-01-02T03:04:05Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 500_000_000, time.UTC), "2026-01-02T03:04:05.500Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 120_000, time.UTC), "2026-01-02T03:04:05.000120Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 7, time.UTC), "2026-01-02T03:04:05.000000007Z"},
		{time.Date(2026, 1, 2, 5, 4, 5, 0, time.FixedZone("x", 2*3600)), "2026-01-02T03:04:05Z"},
	} {
		if got := Timestamp(tc.t); got != tc.want {
			t.Errorf("Timestamp(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func TestPermissions(t *testing.T) {
	for _, tc := range []struct {
		mode uint32
		want string
	}{
		{0o100644, "-rw-r--r--"},
		{0o40755, "drwxr-xr-x"},
		{0o120777, "Lrwxrwxrwx"},
		{0o41777, "dtrwxrwxrwx"},
		{0o104755, "urwxr-xr-x"},
		{0o102755, "grwxr-xr-x"},
		{0o20620, "Dcrw--w----"},
		{0o60660, "Drw-rw----"},
		{0o10644, "prw-r--r--"},
		{0o140755, "Srwxr-xr-x"},
		{0o100000, "----------"},
	} {
		if got := Permissions(tc.mode); got != tc.want {
			t.Errorf("Permissions(%#o) = %q, want %q", tc.mode, got, tc.want)
		}
	}
	// What envd writes is os.Lstat's mode's String: the same for real
	// files of each kind.
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "f"), nil, 0o640))
	must(os.Mkdir(filepath.Join(dir, "d"), 0o750))
	must(os.Chmod(filepath.Join(dir, "d"), 0o1750))
	must(os.Symlink("f", filepath.Join(dir, "l")))
	must(syscall.Mkfifo(filepath.Join(dir, "p"), 0o600))
	for _, n := range []string{"f", "d", "l", "p"} {
		fi, err := os.Lstat(filepath.Join(dir, n))
		must(err)
		if got, want := Permissions(fi.Sys().(*syscall.Stat_t).Mode), fi.Mode().String(); got != want {
			t.Errorf("%s: Permissions = %q, os.Lstat's %q", n, got, want)
		}
	}
}

func TestFileMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		want map[string]string
		err  string
	}{
		{"none", http.Header{"Content-Type": {"x"}}, nil, ""},
		{"lowercased", http.Header{"X-Metadata-Owner": {"Ann"}, "X-Metadata-Team-Id": {"7", "8"}}, map[string]string{"owner": "Ann", "team-id": "7"}, ""},
		{"not canonical", http.Header{"x-metadata-k": {"v"}}, map[string]string{"k": "v"}, ""},
		{"empty key", http.Header{"X-Metadata-": {"v"}}, nil, ""},
		{"empty value", http.Header{"X-Metadata-K": {""}}, map[string]string{"k": ""}, ""},
		{"control byte", http.Header{"X-Metadata-K": {"a\x01"}}, nil, "not printable"},
		{"non-ASCII", http.Header{"X-Metadata-K": {"é"}}, nil, "not printable"},
		{"long key", http.Header{"X-Metadata-" + strings.Repeat("k", MaxMetadataKey+1): {"v"}}, nil, "over"},
		{"too much", http.Header{"X-Metadata-A": {strings.Repeat("v", 3000)}, "X-Metadata-B": {strings.Repeat("v", 3000)}}, nil, "in all"},
	} {
		got, err := FileMetadata(tc.h)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, %v; want an error with %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// FuzzFileMetadata: whatever the headers, what is accepted is within
// envd's bounds, printable, with lowercase keys.
func FuzzFileMetadata(f *testing.F) {
	f.Add("X-Metadata-Key", "value")
	f.Add("x-metadata-", "")
	f.Add("X-Metadata-K\x7f", "v\x00")
	f.Fuzz(func(t *testing.T, name, value string) {
		m, err := FileMetadata(http.Header{name: {value}, "X-Metadata-Other": {value}})
		if err != nil {
			return
		}
		total := 0
		for k, v := range m {
			if k == "" || k != strings.ToLower(k) || len(k) > MaxMetadataKey || printable("", k) != nil || printable("", v) != nil {
				t.Fatalf("accepted %q: %q", k, v)
			}
			total += len(MetadataXattrPrefix) + len(k) + len(v)
		}
		if total > MaxMetadataTotal {
			t.Fatalf("accepted %d bytes", total)
		}
	})
}
