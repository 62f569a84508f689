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
// Creation, deletion and process listing go through
// github.com/containerd/cgroups/v3. Three things are done directly on the
// cgroup files instead, each for a reason documented where it happens:
// the hot counters (read through kept file descriptors, because a monitor
// polls them every few milliseconds), moving the cloning thread on v1
// (the library moves only whole processes or tasks by id, while the
// thread must move itself by writing "0"), and the freezer (the library's
// Freeze spins without a deadline, while Kill must honour its context).
//
// Everything here needs root, except the parsers.
package cgroup
