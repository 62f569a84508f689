package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// insnSize is the size of one classic BPF instruction.
const insnSize = 8

// Encode packs a compiled filter into bytes, so that a program compiled once
// by the host can travel to each sandbox's init.
func Encode(filter []unix.SockFilter) []byte {
	b := make([]byte, 0, len(filter)*insnSize)
	for _, f := range filter {
		b = binary.LittleEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.LittleEndian.AppendUint32(b, f.K)
	}
	return b
}

// Decode unpacks what Encode produced.
func Decode(b []byte) ([]unix.SockFilter, error) {
	if len(b) == 0 || len(b)%insnSize != 0 || len(b)/insnSize > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: encoded filter of %d bytes is not 1-%d instructions", len(b), unix.BPF_MAXINSNS)
	}
	f := make([]unix.SockFilter, len(b)/insnSize)
	for i := range f {
		p := b[i*insnSize:]
		f[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(p), Jt: p[2], Jf: p[3], K: binary.LittleEndian.Uint32(p[4:])}
	}
	return f, nil
}
