// Package sandbox is airlock's sandbox runtime on the host. Create builds a
// sandbox — user, pid, mount, ipc, uts, cgroup and network namespaces, a
// private uid range, a cgroup with the ceilings, and an init process waiting
// on its control channel — and Exec runs commands in it, streaming output and
// resource samples and naming any ceiling that was breached. Destroy removes
// every trace. Creating and executing are separate steps so that sandboxes
// can be created ahead of demand and each used once.
package sandbox
