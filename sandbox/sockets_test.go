package sandbox

import (
	"os"
	"testing"
)

// TestSocketShare: a sandbox's socket buffer ceiling is the part of the
// sandboxes' socket ceiling that its memory ceiling is of the budget, so
// that the shares of the sandboxes a budget admits never add up to more.
func TestSocketShare(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	tests := []struct {
		name                string
		memory, budget, all int64
		want                int64
	}{
		{"a sixteenth of the budget", 1 * gib, 16 * gib, 800 * mib, 50 * mib},
		{"the whole budget", 16 * gib, 16 * gib, 800 * mib, 800 * mib},
		{"over the budget (no budget: the host's memory)", 32 * gib, 16 * gib, 800 * mib, 800 * mib},
		{"a small sandbox gets the floor", 8 * mib, 16 * gib, 800 * mib, minSocketShare},
		{"the floor is never over the whole", 8 * mib, 16 * gib, 512 << 10, 512 << 10},
		{"no ceiling to share", 1 * gib, 16 * gib, 0, 0},
		{"no memory ceiling", 0, 16 * gib, 800 * mib, 0},
		{"huge numbers do not overflow", 1 << 50, 1 << 52, 1 << 40, 1 << 38},
	}
	for _, tt := range tests {
		if got := socketShare(tt.memory, tt.budget, tt.all); got != tt.want {
			t.Errorf("%s: socketShare(%d, %d, %d) = %d, want %d", tt.name, tt.memory, tt.budget, tt.all, got, tt.want)
		}
	}
	// The shares of what a budget admits add up to the whole at most.
	var sum int64
	for range 16 {
		sum += socketShare(1*gib, 16*gib, 800*mib)
	}
	if sum > 800*mib {
		t.Errorf("16 sandboxes of a sixteenth of the budget share %d bytes of %d", sum, 800*mib)
	}
}

// TestSockstatInUse reads the TCP count of a sockstat file, and says when
// it cannot (the caller then reads the sockets themselves).
func TestSockstatInUse(t *testing.T) {
	const v4 = "sockets: used 10\nTCP: inuse 3 orphan 0 tw 1 alloc 2 mem 443\nUDP: inuse 0 mem 0\n"
	const v6 = "TCP6: inuse 0\nUDP6: inuse 0\n"
	for _, tc := range []struct {
		name, text, prefix string
		n                  int64
		ok                 bool
	}{
		{"v4", v4, "TCP: inuse ", 3, true},
		{"v6", v6, "TCP6: inuse ", 0, true},
		{"v6 at the end of the file", "TCP6: inuse 7", "TCP6: inuse ", 7, true},
		{"no such line", v4, "TCP6: inuse ", 0, false},
		{"not a number", "TCP: inuse many\n", "TCP: inuse ", 0, false},
		{"negative", "TCP: inuse -1\n", "TCP: inuse ", 0, false},
		{"empty", "", "TCP: inuse ", 0, false},
	} {
		n, ok := sockstatInUse([]byte(tc.text), tc.prefix)
		if n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
	// This process's own namespace reads.
	if _, _, ok := tcpInUse(os.Getpid()); !ok {
		t.Error("this process's sockstat could not be read")
	}
}
