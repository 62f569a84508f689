// Package wire is the compact binary encoding of the messages between an
// airlock process, its spawner and each sandbox's init: varints, strings
// and byte strings with their length first, written and read in a fixed
// order by each message's own code.
//
// It replaces JSON there for start-up cost: the first JSON decode of a
// type in a fresh process builds the decoder through reflection (about
// 0.2 ms for init's setup message, paid by every sandbox), and init then
// links neither encoding/json nor reflect.
//
// Messages from init are untrusted input to the host: Reader checks every
// length against what is left and stops at the first error, which sticks.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort says a message ended before one of its fields did.
var ErrShort = errors.New("wire: message too short")

// Writer appends fields to a buffer.
type Writer struct {
	B []byte
}

// Uint appends an unsigned varint.
func (w *Writer) Uint(v uint64) { w.B = binary.AppendUvarint(w.B, v) }

// Int appends a signed varint.
func (w *Writer) Int(v int64) { w.B = binary.AppendVarint(w.B, v) }

// Bool appends one byte, 0 or 1.
func (w *Writer) Bool(v bool) {
	if v {
		w.B = append(w.B, 1)
	} else {
		w.B = append(w.B, 0)
	}
}

// String appends a length and the bytes of s.
func (w *Writer) String(s string) {
	w.Uint(uint64(len(s)))
	w.B = append(w.B, s...)
}

// Bytes appends a length and b.
func (w *Writer) Bytes(b []byte) {
	w.Uint(uint64(len(b)))
	w.B = append(w.B, b...)
}

// Strings appends a count and each string.
func (w *Writer) Strings(ss []string) {
	w.Uint(uint64(len(ss)))
	for _, s := range ss {
		w.String(s)
	}
}

// Reader reads fields in the order they were written. After the first
// error every read returns a zero value; Err reports the error.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first error met, or nil.
func (r *Reader) Err() error { return r.err }

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// Done reports an error unless every byte was read.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("wire: %d bytes after the message", len(r.b))
	}
	return r.err
}

// Uint reads an unsigned varint.
func (r *Reader) Uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(ErrShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uint16 reads an unsigned varint that must fit in 16 bits.
func (r *Reader) Uint16() uint16 {
	v := r.Uint()
	if v > 0xffff {
		r.fail(fmt.Errorf("wire: %d does not fit in 16 bits", v))
		return 0
	}
	return uint16(v)
}

// Int reads a signed varint.
func (r *Reader) Int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(ErrShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bool reads one byte that must be 0 or 1.
func (r *Reader) Bool() bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 {
		r.fail(ErrShort)
		return false
	}
	c := r.b[0]
	r.b = r.b[1:]
	if c > 1 {
		r.fail(fmt.Errorf("wire: bad boolean %d", c))
	}
	return c == 1
}

// Count reads a count of items that each take at least one byte, so a
// count larger than what is left is refused before anything is allocated.
func (r *Reader) Count() int {
	n := r.Uint()
	if n > uint64(len(r.b)) {
		r.fail(ErrShort)
		return 0
	}
	return int(n)
}

func (r *Reader) raw() []byte {
	n := r.Uint()
	if n > uint64(len(r.b)) {
		r.fail(ErrShort)
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// String reads a string.
func (r *Reader) String() string { return string(r.raw()) }

// Bytes reads a byte string (a copy).
func (r *Reader) Bytes() []byte {
	b := r.raw()
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// Strings reads a count and that many strings.
func (r *Reader) Strings() []string {
	n := r.Count()
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.String()
	}
	return out
}
