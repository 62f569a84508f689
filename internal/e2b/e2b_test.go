package e2b

import (
	"bytes"
	"errors"
	"testing"
)

func TestReadRequest(t *testing.T) {
	ok := AppendEnvelope(nil, 0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`))
	var req StartRequest
	if err := ReadRequest(bytes.NewReader(ok), &req); err != nil || req.Process.Cmd != "/bin/bash" || len(req.Process.Args) != 3 {
		t.Fatalf("a well-formed request: %+v %v", req, err)
	}
	for _, tt := range []struct {
		name string
		in   []byte
		code string
	}{
		{"empty", nil, CodeInvalidArgument},
		{"cut short header", ok[:3], CodeInvalidArgument},
		{"cut short message", ok[:12], CodeInvalidArgument},
		{"over the bound", []byte{0, 0xff, 0xff, 0xff, 0xff}, CodeResourceExhaust},
		{"compressed", append([]byte{FlagCompressed}, ok[1:]...), CodeUnimplemented},
		{"end of stream", AppendEnvelope(nil, FlagEndStream, []byte(`{}`)), CodeInvalidArgument},
		{"not JSON", AppendEnvelope(nil, 0, []byte(`{"process":`)), CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var req StartRequest
			err := ReadRequest(bytes.NewReader(tt.in), &req)
			var re *RPCError
			if !errors.As(err, &re) || re.Code != tt.code {
				t.Fatalf("ReadRequest = %v, want code %s", err, tt.code)
			}
		})
	}
}

// FuzzReadEnvelope: whatever a client sends, reading stays within the
// bound and what is read writes back the same.
func FuzzReadEnvelope(f *testing.F) {
	f.Add(AppendEnvelope(nil, 0, []byte(`{"process":{"cmd":"sh"}}`)))
	f.Add([]byte{2, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		flags, msg, err := ReadEnvelope(bytes.NewReader(b), 1<<10)
		if err != nil {
			return
		}
		if len(msg) > 1<<10 {
			t.Fatalf("read %d bytes past a bound of 1 KiB", len(msg))
		}
		if again := AppendEnvelope(nil, flags, msg); !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("round trip: %x, read from %x", again, b)
		}
	})
}

// TestSignature checks the signature against one the SDK made (and
// openssl agreed with): a different path, operation, user, token or
// expiry gives another.
func TestSignature(t *testing.T) {
	const want = "v1_shr9/90N2wWSS66f1qgDcvlx1JHMJsE3NbhNt/Eyd6c"
	if got := Signature("/home/user/a.txt", "read", "", "tok-abc", 0); got != want {
		t.Fatalf("Signature = %q, want %q", got, want)
	}
	for _, other := range []string{
		Signature("/home/user/b.txt", "read", "", "tok-abc", 0),
		Signature("/home/user/a.txt", "write", "", "tok-abc", 0),
		Signature("/home/user/a.txt", "read", "root", "tok-abc", 0),
		Signature("/home/user/a.txt", "read", "", "tok-abd", 0),
		Signature("/home/user/a.txt", "read", "", "tok-abc", 1),
	} {
		if other == want {
			t.Errorf("a different input signs the same: %q", other)
		}
	}
}

// FuzzCheckSigned: a URL that passes CheckSigned never verifies with a
// signature the SDK made for the other operation, whatever path, user
// and expiry the signer chose (the signed strings are compared, so a
// match is a real one, not a hash collision).
func FuzzCheckSigned(f *testing.F) {
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef" // as the daemon's: 48 hex
	f.Add("/workspace/x:write:", "", int64(0), "/workspace/x", ":read:", int64(0))
	f.Add("/workspace/x", "write:u", int64(0), "/workspace/x:read", "u", int64(0))
	f.Add("a:b", "", int64(5), "a", "b", int64(5))
	f.Fuzz(func(t *testing.T, path, user string, exp int64, path2, user2 string, exp2 int64) {
		if exp < 0 || exp2 <= 0 {
			exp2 = 0 // the daemon refuses an expiry that is not positive
		}
		if CheckSigned(path2, user2) != nil {
			return
		}
		for _, ops := range [][2]string{{"read", "write"}, {"write", "read"}} {
			if signed(path, ops[0], user, token, exp) == signed(path2, ops[1], user2, token, exp2) {
				t.Fatalf("%q signed for %s verifies for %s as %q by %q until %d", path, ops[0], ops[1], path2, user2, exp2)
			}
		}
	})
}
