package cgroup

import (
	"slices"
	"testing"
)

// TestV1Resources checks what Create writes on v1, and in which order:
// memsw only with swap accounting and after limit_in_bytes (the kernel
// refuses a memsw limit below it), the cpu quota alone (for the kernel's
// default period, which TestCreateWritesLimits reads back), each in its controller's
// hierarchy, and nothing for a limit that is not set.
func TestV1Resources(t *testing.T) {
	// memory, pids, cpu+cpuacct co-mounted, freezer.
	layout := &v1Layout{idx: [numCtrls]int{ctrlMemory: 0, ctrlPids: 1, ctrlCPU: 2, ctrlCPUAcct: 2, ctrlFreezer: 3}}
	mem := limitWrite{0, "memory.limit_in_bytes", "67108864"}
	memsw := limitWrite{0, "memory.memsw.limit_in_bytes", "67108864"}
	tcp := limitWrite{0, "memory.kmem.tcp.limit_in_bytes", "67108864"}
	pids := limitWrite{1, "pids.max", "17"}
	quota := limitWrite{2, "cpu.cfs_quota_us", "150000"}
	tests := []struct {
		name       string
		memsw, tcp bool
		l          Limits
		want       []limitWrite
	}{
		{"all, swap and tcp accounting", true, true, Limits{MemoryBytes: 64 << 20, Pids: 17, CPUMilli: 1500}, []limitWrite{mem, memsw, tcp, pids, quota}},
		{"all, no swap accounting", false, true, Limits{MemoryBytes: 64 << 20, Pids: 17, CPUMilli: 1500}, []limitWrite{mem, tcp, pids, quota}},
		{"all, a kernel without tcp accounting", true, false, Limits{MemoryBytes: 64 << 20, Pids: 17, CPUMilli: 1500}, []limitWrite{mem, memsw, pids, quota}},
		{"memory only", true, true, Limits{MemoryBytes: 64 << 20}, []limitWrite{mem, memsw, tcp}},
		{"socket buffers below memory", true, true, Limits{MemoryBytes: 64 << 20, SocketBytes: 4 << 20}, []limitWrite{mem, memsw, {0, "memory.kmem.tcp.limit_in_bytes", "4194304"}}},
		{"socket buffers only", true, true, Limits{SocketBytes: 4 << 20}, []limitWrite{{0, "memory.kmem.tcp.limit_in_bytes", "4194304"}}},
		{"cpu only", true, true, Limits{CPUMilli: 1500}, []limitWrite{quota}},
		{"no limits", true, true, Limits{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Parent{version: V1, v1: layout, memsw: tc.memsw, tcpmem: tc.tcp}
			if got := p.v1Resources(tc.l); !slices.Equal(got, tc.want) {
				t.Errorf("v1Resources(%+v) = %+v, want %+v", tc.l, got, tc.want)
			}
		})
	}
	// Lowering a live group never writes the socket ceiling from the
	// memory ceiling: that would raise a sandbox's share of the host's
	// TCP memory to its (lowered) memory ceiling.
	lowered := []struct {
		name string
		l    Limits
		want []limitWrite
	}{
		{"memory", Limits{MemoryBytes: 64 << 20}, []limitWrite{mem, memsw}},
		{"memory and pids", Limits{MemoryBytes: 64 << 20, Pids: 17}, []limitWrite{mem, memsw, pids}},
		{"socket buffers set", Limits{SocketBytes: 4 << 20}, []limitWrite{{0, "memory.kmem.tcp.limit_in_bytes", "4194304"}}},
	}
	for _, tc := range lowered {
		t.Run("lowering "+tc.name, func(t *testing.T) {
			p := &Parent{version: V1, v1: layout, memsw: true, tcpmem: true}
			if got := p.v1Lowering(tc.l); !slices.Equal(got, tc.want) {
				t.Errorf("v1Lowering(%+v) = %+v, want %+v", tc.l, got, tc.want)
			}
		})
	}
}
