package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"
)

// hello captures the ClientHello that crypto/tls sends for cfg.
func hello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		_ = tls.Client(c, cfg).Handshake()
		c.Close()
	}()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	raw, _, err := Read(s)
	s.Close()
	if err != nil {
		t.Fatalf("reading a real ClientHello: %v", err)
	}
	return raw
}

func TestReadRealClientHello(t *testing.T) {
	tests := []struct {
		cfg  *tls.Config
		want string
	}{
		{&tls.Config{ServerName: "api.example.com"}, "api.example.com"},
		{&tls.Config{ServerName: "API.Example.COM", MaxVersion: tls.VersionTLS12}, "API.Example.COM"},
		// Go sends no SNI for an IP address.
		{&tls.Config{ServerName: "192.0.2.1"}, ""},
	}
	for _, tt := range tests {
		raw := hello(t, tt.cfg)
		got, name, err := Read(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", tt.want, err)
		}
		if name != tt.want {
			t.Errorf("server name: got %q, want %q", name, tt.want)
		}
		if !bytes.Equal(got, raw) {
			t.Errorf("raw bytes were not returned whole")
		}
	}
}

func TestReadSplitAcrossRecords(t *testing.T) {
	raw := hello(t, &tls.Config{ServerName: "split.example.com"})
	body := raw[5:]
	// Re-frame the handshake message as records of at most 50 bytes.
	var framed []byte
	for len(body) > 0 {
		n := min(50, len(body))
		framed = append(framed, 0x16, 3, 1, 0, byte(n))
		framed = append(framed, body[:n]...)
		body = body[n:]
	}
	got, name, err := Read(bytes.NewReader(framed))
	if err != nil || name != "split.example.com" || !bytes.Equal(got, framed) {
		t.Fatalf("got name %q err %v (raw equal %v)", name, err, bytes.Equal(got, framed))
	}
}

func TestReadRefusals(t *testing.T) {
	raw := hello(t, &tls.Config{ServerName: "a.example.com"})
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"plain http", []byte("GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n"), ErrNotTLS},
		{"one byte", []byte{'G'}, ErrNotTLS},
		{"empty", nil, ErrMalformed},
		{"truncated", raw[:len(raw)-10], ErrMalformed},
		{"header only", raw[:5], ErrMalformed},
		{"ssl2 version", append([]byte{0x16, 2, 0}, raw[3:]...), ErrMalformed},
		{"zero-length record", []byte{0x16, 3, 1, 0, 0}, ErrMalformed},
		{"huge record", []byte{0x16, 3, 1, 0xff, 0xff}, ErrMalformed},
		{"not a client hello", []byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}, ErrMalformed},
		{"huge hello", []byte{0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, ErrMalformed},
	}
	for _, tt := range tests {
		_, _, err := Read(bytes.NewReader(tt.in))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// build makes a ClientHello body with the given extensions block.
func build(exts []byte) []byte {
	b := make([]byte, 2+32)
	b = append(b, 0)                // session id
	b = append(b, 0, 2, 0x13, 0x01) // one cipher suite
	b = append(b, 1, 0)             // null compression
	if exts != nil {
		b = append(b, byte(len(exts)>>8), byte(len(exts)))
		b = append(b, exts...)
	}
	return b
}

func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	data := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
	return append([]byte{0, 0, byte(len(data) >> 8), byte(len(data))}, data...)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		body    []byte
		want    string
		wantErr bool
	}{
		{"no extensions", build(nil), "", false},
		{"sni", build(sniExt("x.example.com")), "x.example.com", false},
		{"two names", build(sniExt("a.example.com", "b.example.com")), "", true},
		{"duplicate extension", build(append(sniExt("a.example.com"), sniExt("b.example.com")...)), "", true},
		{"empty name", build(sniExt("")), "", true},
		{"nul in name", build(sniExt("a\x00.example.com")), "", true},
		{"space in name", build(sniExt("a b")), "", true},
		{"trailing bytes", append(build(sniExt("a.example.com")), 0), "", true},
		{"extension length lies", build([]byte{0, 0, 0, 9, 0}), "", true},
		{"short", []byte{3, 3}, "", true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.body)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q, error %v", tt.name, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error %v is not ErrMalformed", tt.name, err)
		}
	}
}

// TestParseECH: a ClientHello that offers Encrypted Client Hello shows
// its outer, public name; the name the server will serve is hidden, so it
// is refused as such, before or after the server name extension.
func TestParseECH(t *testing.T) {
	ech := []byte{0xfe, 0x0d, 0, 4, 0, 1, 2, 3}
	for _, body := range [][]byte{
		build(append(sniExt("public.example.com"), ech...)),
		build(append(append([]byte{}, ech...), sniExt("public.example.com")...)),
		build(ech),
	} {
		if _, err := Parse(body); !errors.Is(err, ErrEncrypted) {
			t.Errorf("got %v, want ErrEncrypted", err)
		}
	}
}

func FuzzRead(f *testing.F) {
	f.Add(hello(f, &tls.Config{ServerName: "fuzz.example.com"}))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, name, err := Read(bytes.NewReader(in))
		if !bytes.HasPrefix(in, raw) {
			t.Fatalf("raw (%d bytes) is not a prefix of the input (%d bytes)", len(raw), len(in))
		}
		if err == nil && len(name) > maxServerNameLen {
			t.Fatalf("name of %d bytes accepted", len(name))
		}
		if err != nil && name != "" {
			t.Fatalf("name %q with error %v", name, err)
		}
		if errors.Is(err, ErrNotTLS) && len(raw) == 0 {
			t.Fatal("ErrNotTLS with no bytes")
		}
	})
}
