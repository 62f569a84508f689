package spawner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/initproto"
)

// shapes records, per protocol version, a digest of every message type the
// host, the spawner and init exchange. A change to any of them without a
// new initproto.Version would let an airlock drive an airlock-init of
// another build that only looks compatible.
var shapes = map[int]string{
	2:  "37f58add09193fd1",
	3:  "d85bcb9af73d9d67",
	4:  "bbe38e2fb8f2642d",
	5:  "ed756baba79ec405",
	6:  "5b353e039907e418",
	7:  "faa38e2842fa0dcd",
	8:  "43e7d04ca3cf3923",
	9:  "63059f6d981429ac",
	10: "3f106f24c4942118",
}

func TestProtocolShape(t *testing.T) {
	var b strings.Builder
	for _, v := range []any{initproto.Message{}, Request{}, Reply{}, Config{}, Hello{}} {
		describe(&b, reflect.TypeOf(v), map[reflect.Type]bool{})
		b.WriteByte('\n')
	}
	sum := sha256.Sum256([]byte(b.String()))
	got := hex.EncodeToString(sum[:8])
	want, ok := shapes[initproto.Version]
	if !ok || want != got {
		t.Fatalf("the protocol's messages are not those of version %d (digest %s, recorded %q): if they changed, bump initproto.Version and record %s for it here\n%s",
			initproto.Version, got, want, got, b.String())
	}
}

// describe writes t's structure: exported field names, JSON tags and
// types.
func describe(b *strings.Builder, t reflect.Type, seen map[reflect.Type]bool) {
	switch t.Kind() {
	case reflect.Pointer:
		b.WriteString("*")
		describe(b, t.Elem(), seen)
	case reflect.Slice:
		b.WriteString("[]")
		describe(b, t.Elem(), seen)
	case reflect.Map:
		b.WriteString("map[")
		describe(b, t.Key(), seen)
		b.WriteString("]")
		describe(b, t.Elem(), seen)
	case reflect.Struct:
		if seen[t] {
			b.WriteString(t.Name())
			return
		}
		seen[t] = true
		fmt.Fprintf(b, "%s{", t.Name())
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue // not on the wire (a Prog's resolved form, say)
			}
			fmt.Fprintf(b, "%s %q ", f.Name, f.Tag.Get("json"))
			describe(b, f.Type, seen)
			b.WriteString(";")
		}
		b.WriteString("}")
	default:
		b.WriteString(t.Kind().String())
	}
}
