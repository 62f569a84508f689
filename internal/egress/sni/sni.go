// Package sni reads the server name a TLS client asks for from its
// ClientHello, without terminating TLS. airlock's transparent listeners use it
// to refuse a connection whose TLS server name is not the destination the
// sandbox's resolver handed out: without the check, a client could resolve
// an allowed name and then talk TLS to a different virtual host on the same
// upstream (domain fronting).
package sni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrNotTLS means the first bytes are not a TLS handshake record.
var ErrNotTLS = errors.New("not a TLS handshake")

// ErrMalformed means the bytes claim to be a ClientHello but are not a
// valid one.
var ErrMalformed = errors.New("malformed TLS ClientHello")

// ErrEncrypted means the ClientHello offers Encrypted Client Hello: the
// server name it shows is the outer, public one, and the name the server
// will serve is hidden from the check.
var ErrEncrypted = errors.New("TLS ClientHello with Encrypted Client Hello (ECH)")

const (
	recordHeaderLen  = 5
	recordHandshake  = 0x16
	maxRecordPayload = 16384 + 2048 // TLSCiphertext bound; plaintext is 2^14
	handshakeHello   = 1
	// maxHello bounds what is buffered before a decision. Real ClientHellos
	// (even with post-quantum key shares) are a few KiB.
	maxHello         = 32 << 10
	extServerName    = 0
	extECH           = 0xfe0d // encrypted_client_hello (RFC 9849)
	nameTypeHost     = 0
	maxServerNameLen = 253
)

// Read reads one ClientHello from r. It returns every byte it consumed, so
// the caller can replay them upstream, and the server name ("" when the
// client sent none). With ErrNotTLS, raw holds the bytes read so far (at
// least one) so that a caller may treat the stream as something else.
func Read(r io.Reader) (raw []byte, serverName string, err error) {
	var hdr [recordHeaderLen]byte
	var hs []byte // reassembled handshake bytes
	for {
		n, err := io.ReadFull(r, hdr[:])
		raw = append(raw, hdr[:n]...)
		if err != nil {
			if len(raw) > 0 && raw[0] != recordHandshake {
				return raw, "", ErrNotTLS
			}
			return raw, "", fmt.Errorf("%w: %w", ErrMalformed, unexpected(err))
		}
		if hdr[0] != recordHandshake {
			return raw, "", ErrNotTLS
		}
		if hdr[1] != 3 {
			return raw, "", fmt.Errorf("%w: record version %d.%d", ErrMalformed, hdr[1], hdr[2])
		}
		size := int(binary.BigEndian.Uint16(hdr[3:]))
		if size == 0 || size > maxRecordPayload || len(hs)+size > maxHello {
			return raw, "", fmt.Errorf("%w: record of %d bytes", ErrMalformed, size)
		}
		start := len(raw)
		raw = append(raw, make([]byte, size)...)
		if n, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+n], "", fmt.Errorf("%w: %w", ErrMalformed, unexpected(err))
		}
		hs = append(hs, raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != handshakeHello {
			return raw, "", fmt.Errorf("%w: handshake type %d, want ClientHello", ErrMalformed, hs[0])
		}
		body := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if 4+body > maxHello {
			return raw, "", fmt.Errorf("%w: ClientHello of %d bytes", ErrMalformed, body)
		}
		if len(hs) < 4+body {
			continue
		}
		name, err := Parse(hs[4 : 4+body])
		return raw, name, err
	}
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// reader is a bounds-checked cursor; every read past the end sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

// vec reads a vector with an n-byte length prefix.
func (r *reader) vec(n int) *reader {
	var l int
	if n == 1 {
		l = r.u8()
	} else {
		l = r.u16()
	}
	return &reader{b: r.bytes(l), bad: r.bad}
}

// Parse returns the server name of a ClientHello handshake body (without
// the 4-byte handshake header), or "" when it has none.
func Parse(body []byte) (string, error) {
	r := &reader{b: body}
	r.bytes(2 + 32) // legacy_version, random
	if sid := r.vec(1); len(sid.b) > 32 {
		return "", fmt.Errorf("%w: session id of %d bytes", ErrMalformed, len(sid.b))
	}
	if cs := r.vec(2); len(cs.b) < 2 || len(cs.b)%2 != 0 {
		r.bad = true
	}
	if cm := r.vec(1); len(cm.b) < 1 {
		r.bad = true
	}
	if r.bad {
		return "", fmt.Errorf("%w: truncated", ErrMalformed)
	}
	if len(r.b) == 0 {
		return "", nil // no extensions at all
	}
	exts := r.vec(2)
	if r.bad || len(r.b) != 0 {
		return "", fmt.Errorf("%w: bad extensions length", ErrMalformed)
	}
	seen := map[int]bool{}
	name := ""
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec(2)
		if exts.bad {
			return "", fmt.Errorf("%w: truncated extension", ErrMalformed)
		}
		// Two extensions of one type are illegal (RFC 8446 4.2); a server and
		// this check could otherwise read different names.
		if seen[typ] {
			return "", fmt.Errorf("%w: duplicate extension %d", ErrMalformed, typ)
		}
		seen[typ] = true
		if typ == extECH {
			return "", ErrEncrypted
		}
		if typ != extServerName {
			continue
		}
		n, err := serverName(data)
		if err != nil {
			return "", err
		}
		name = n
	}
	return name, nil
}

// serverName parses the server_name extension (RFC 6066 section 3). It
// must hold exactly one host_name entry.
func serverName(r *reader) (string, error) {
	list := r.vec(2)
	if r.bad || len(r.b) != 0 {
		return "", fmt.Errorf("%w: bad server_name extension", ErrMalformed)
	}
	name := ""
	for len(list.b) > 0 {
		typ := list.u8()
		v := list.vec(2)
		if list.bad {
			return "", fmt.Errorf("%w: truncated server_name", ErrMalformed)
		}
		if typ != nameTypeHost {
			continue
		}
		if name != "" {
			return "", fmt.Errorf("%w: more than one host name", ErrMalformed)
		}
		if len(v.b) == 0 || len(v.b) > maxServerNameLen {
			return "", fmt.Errorf("%w: host name of %d bytes", ErrMalformed, len(v.b))
		}
		for _, c := range v.b {
			// Only printable ASCII; the caller compares it to a
			// validated name, so anything else can never match anyway.
			if c <= ' ' || c >= 0x7f {
				return "", fmt.Errorf("%w: host name holds byte %#x", ErrMalformed, c)
			}
		}
		name = string(v.b)
	}
	return name, nil
}
