package sbinit

import "testing"

func BenchmarkProgram(b *testing.B) {
	c := setupOK
	c.Binds = []Bind{{Source: "/usr", Target: "/usr"}, {Source: "/etc/ld.so.cache", Target: "/etc/ld.so.cache", File: true}, {Source: "/etc/ssl/certs", Target: "/etc/ssl/certs"}}
	c.Symlinks = []Symlink{{Target: "usr/bin", Path: "/bin"}, {Target: "usr/lib", Path: "/lib"}}
	c.Files = []File{{Path: "/etc/hosts", Data: "127.0.0.1 localhost\n", Mode: 0o644}, {Path: "/etc/passwd", Data: "x", Mode: 0o644}, {Path: "/etc/group", Data: "x", Mode: 0o644}}
	c.Devices = []string{"null", "zero", "full", "random", "urandom"}
	c.Seccomp = make([]byte, 8*400)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Program(&c); err != nil {
			b.Fatal(err)
		}
	}
}
