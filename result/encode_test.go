package result

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestEncodeSameAsMarshal checks that a result written from its buffers is
// the bytes json.Marshal gives, its length told beforehand.
func TestEncodeSameAsMarshal(t *testing.T) {
	for name, out := range map[string]string{
		"empty":    "",
		"text":     "hello\nworld\n",
		"escapes":  "\"quoted\" \\ <b>&</b> \t\r\x00\x1f\x7f \u2028\u2029 é 日本",
		"binary":   "\xff\xfe\x00abc",
		"long":     string(bytes.Repeat([]byte("a\"b\n"), 40000)),
		"longbin":  string(bytes.Repeat([]byte{0xff, 'x', 0}, 30001)),
		"boundary": string(bytes.Repeat([]byte("\u2028"), 20000)),
	} {
		t.Run(name, func(t *testing.T) {
			checkEncode(t, &Result{Outcome: Exited, Error: `"stdout":"","stderr":""`, Stdout: Output(out), Stderr: Output(out + "x"), Limit: &Limit{Name: LimitOutput}})
		})
	}
}

func checkEncode(t *testing.T, r *Result) {
	t.Helper()
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	n, err := e.WriteTo(&got)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("WriteTo: %d, %v (wrote %d)", n, err, got.Len())
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got  %.300q\nwant %.300q", got.Bytes(), want)
	}
	if e.Len() != int64(len(want)) {
		t.Fatalf("Len %d, want %d", e.Len(), len(want))
	}
}

func FuzzEncode(f *testing.F) {
	f.Add([]byte("hi\n"), []byte("\xff"), "err")
	f.Add([]byte("\u2028<>&"), []byte{}, `"stdout":""`)
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, msg string) {
		checkEncode(t, &Result{Outcome: Error, Error: msg, Stdout: stdout, Stderr: stderr})
		if utf8.Valid(stdout) && utf8.Valid(stderr) && utf8.ValidString(msg) {
			checkPieces(t, stdout, []byte(msg), stderr)
		}
	})
}

// checkPieces checks that pieces written as one JSON string are the bytes
// json.Marshal gives for their concatenation, their length told first.
func checkPieces(t *testing.T, pieces ...[]byte) {
	t.Helper()
	want, _ := json.Marshal(string(bytes.Join(pieces, nil)))
	var got bytes.Buffer
	if err := WriteJSONString(&got, pieces...); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("WriteJSONString: %q, %v; want %q", got.Bytes(), err, want)
	}
	if n := JSONStringLen(pieces...); n != int64(len(want)) {
		t.Fatalf("JSONStringLen %d, want %d", n, len(want))
	}
}

func TestWriteJSONStringPieces(t *testing.T) {
	checkPieces(t, []byte("limit exceeded\n"), []byte("stdout:\n"), bytes.Repeat([]byte("a\u2028<\x01"), 20000), []byte("\n"))
	checkPieces(t)
}
