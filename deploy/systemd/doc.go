// Package systemd holds airlock's systemd unit (airlock.service, and the
// drop-in for hosts with cgroup v1 controllers) and the tests that read
// it and run it: TestUnitUnderSystemd follows the unit's install steps on
// a host booted with systemd as PID 1 (the guest of scripts/test-vm
// --systemd; see docs/testing.md).
package systemd
