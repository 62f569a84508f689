package zstd

import (
	"bytes"
	"io"
	"testing"
)

// frame is a zstd frame asking for a window of 2^log bytes and holding
// data in one raw block: magic, a frame header with only a window
// descriptor, the last block's header, the bytes.
func frame(log uint, data []byte) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(log-10) << 3}
	h := uint32(len(data))<<3 | 1 // raw block, the last
	b = append(b, byte(h), byte(h>>8), byte(h>>16))
	return append(b, data...)
}

// TestWindowCap: a stream that asks the decoder for a window over
// maxWindow (memory it would set aside, asked for by an untrusted archive)
// is refused; one within it decodes.
func TestWindowCap(t *testing.T) {
	data := []byte("airlock")
	for _, tc := range []struct {
		log uint
		ok  bool
	}{{20, true}, {27, true}, {28, false}, {31, false}} {
		rc, err := Open(bytes.NewReader(frame(tc.log, data)))
		var got []byte
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		switch {
		case tc.ok && (err != nil || !bytes.Equal(got, data)):
			t.Errorf("window 2^%d: %v (%q back)", tc.log, err, got)
		case !tc.ok && err == nil:
			t.Errorf("window 2^%d, over the cap of 2^27, decoded", tc.log)
		}
	}
}
