// Package cgroup gives every sandbox its own control group under one
// airlock-owned parent, on both cgroup v2 (unified) hosts and cgroup v1 or
// hybrid hosts.
//
// On a hybrid host (v1 controllers plus a cgroup2 mount that normally holds
// no useful controllers) the v1 hierarchies are used, because that is where
// the memory, pids and cpu controllers live.
//
// Only the controllers airlock relies on are touched: memory, pids, cpu
// (bandwidth), cpuacct (v1 usage; v2 reads cpu.stat) and freezer (the v1
// kill fallback). Named hierarchies such as name=systemd, and devices,
// blkio and cpuset are left alone: every extra hierarchy is another
// directory to create, enter and remove on each sandbox, and none of them
// limits anything airlock enforces.
//
// Everything is done directly on the cgroup files: mkdir for a group (an
// exclusive one, so a leftover is never adopted), one write per limit,
// cgroup.procs read down the group's subtree to list its processes, rmdir
// deepest first to remove it, and statfs of /sys/fs/cgroup to tell v2 from
// v1. The package once went through github.com/containerd/cgroups/v3 for
// that, which brought some 50 packages of ten other modules
// (runtime-spec, protobuf, cilium/ebpf, godbus, logrus and more) into
// every airlock process, their initialisers run at each start, for
// nothing more than those few system calls. The hot paths have reasons
// of their own, documented where they happen: the counters are read
// through kept file descriptors (a monitor polls them every few
// milliseconds), the cloning thread on v1 moves itself by writing "0" to
// each tasks file, and the wait for the freezer has a deadline, so that
// Kill honours its context.
//
// Everything here needs root, except the parsers.
package cgroup
