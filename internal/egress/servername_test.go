package egress

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// nameLog is an upstream's own record of the TLS server names it was
// asked for.
type nameLog struct {
	mu    sync.Mutex
	names []string
}

func (l *nameLog) add(n string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, n)
}

func (l *nameLog) has(n string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, got := range l.names {
		if got == n {
			return true
		}
	}
	return false
}

// namedUpstream is a TLS server that logs every ClientHello's server name.
func namedUpstream(t *testing.T) (*nameLog, uint16) {
	t.Helper()
	log := &nameLog{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	srv.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		log.add(h.ServerName)
		return nil, nil
	}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	return log, uint16(port)
}

func TestNotHTTP1(t *testing.T) {
	for _, tt := range []struct {
		line string
		ok   bool
	}{
		{"GET / HTTP/1.1", true},
		{"POST /a?b HTTP/1.0\r", true},
		{"OPTIONS * HTTP/1.1", true},
		{"get / HTTP/1.1", false},
		{"GET / HTTP/2.0", false},
		{"PRI * HTTP/2.0", false},
		{"GET  / HTTP/1.1", false},
		{"GET /", false},
		{"SSH-2.0-OpenSSH_9.6", false},
		{"", false},
	} {
		if got := notHTTP1([]byte(tt.line)) == ""; got != tt.ok {
			t.Errorf("notHTTP1(%q) ok = %v, want %v", tt.line, got, tt.ok)
		}
	}
}

func TestSameHost(t *testing.T) {
	for _, tt := range []struct {
		authority string
		ok        bool
	}{
		{"web.test", true},
		{"WEB.test:8080", true},
		{"web.test.:8080", true},
		{"web.test:80", false},
		{"evil.test:8080", false},
		{"web.test.evil.test", false},
		{"[::1]:8080", false},
		{"", false},
	} {
		if got := sameHost(tt.authority, "web.test", 8080); got != tt.ok {
			t.Errorf("sameHost(%q) = %v, want %v", tt.authority, got, tt.ok)
		}
	}
}

// echConfigList builds an ECHConfigList (RFC 9849) with one config for
// publicName and a fresh X25519 key: enough for Go's TLS client to offer
// Encrypted Client Hello.
func echConfigList(t *testing.T, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var c []byte
	c = append(c, 7)          // config_id
	c = append(c, 0x00, 0x20) // kem_id: DHKEM(X25519, HKDF-SHA256)
	pub := key.PublicKey().Bytes()
	c = append(c, byte(len(pub)>>8), byte(len(pub)))
	c = append(c, pub...)
	c = append(c, 0, 4, 0x00, 0x01, 0x00, 0x01) // HKDF-SHA256, AES-128-GCM
	c = append(c, 64)                           // maximum_name_length
	c = append(c, byte(len(publicName)))
	c = append(c, publicName...)
	c = append(c, 0, 0) // no extensions
	cfg := append([]byte{0xfe, 0x0d, byte(len(c) >> 8), byte(len(c))}, c...)
	return append([]byte{byte(len(cfg) >> 8), byte(len(cfg))}, cfg...)
}
