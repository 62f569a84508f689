package seccomp

import (
	"reflect"
	"testing"
)

func TestEncodeRoundTrip(t *testing.T) {
	prog, err := DefaultProfile().Compile()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(Encode(prog))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, prog) {
		t.Fatalf("round trip changed the program")
	}
	for _, bad := range [][]byte{nil, make([]byte, 7), make([]byte, 8*5000)} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%d bytes) accepted", len(bad))
		}
	}
}
