package e2bserver

import (
	"reflect"
	"testing"
)

func TestIDNames(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[uint32]string
	}{
		{"passwd", "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n", map[uint32]string{0: "root", 1000: "user"}},
		{"group", "root:x:0:\nusers:x:100:user,ann\n", map[uint32]string{0: "root", 100: "users"}},
		{"first wins", "a:x:5:5\nb:x:5:5\n", map[uint32]string{5: "a"}},
		{"no final newline", "a:x:7", map[uint32]string{7: "a"}},
		{"bad lines passed over", "# c\n+nis::1:\n::2:\nx:x:-1:\ny:x:4294967296:\nz:x:1x:\nshort:x\nok:x:3:\n", map[uint32]string{3: "ok"}},
		{"empty", "", map[uint32]string{}},
	} {
		if got := idNames([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: idNames = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzIDNames: the sandbox writes its /etc/passwd; whatever is in it,
// reading it neither panics nor names an id with a line's other fields.
func FuzzIDNames(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\n"))
	f.Add([]byte("a:b:c\n\n::::\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, n := range idNames(b) {
			for i := 0; i < len(n); i++ {
				if n[i] == ':' || n[i] == '\n' {
					t.Fatalf("name %q", n)
				}
			}
		}
	})
}
