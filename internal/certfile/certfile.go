// Package certfile serves a TLS certificate from its PEM files, and
// takes a renewed one (a certbot run, a Kubernetes secret's update)
// without a restart: the files are looked at again at most every
// CheckEvery, and read again when either changed. A renewal that does not
// load (a half-written file, a key of another certificate) keeps the
// certificate in use and is said once in the log.
package certfile

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CheckEvery is the least time between two looks at the files.
var CheckEvery = 30 * time.Second

// Source is a certificate read from its files.
type Source struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]stamp // the files as last read
	checked time.Time
	failed  [2]stamp // the files as last failed, said once
}

// stamp is what tells a file's change.
type stamp struct {
	mod  time.Time
	size int64
}

// Load reads the certificate chain and its key; an error names the file
// and what is wrong.
func Load(cert, key string, log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{cert: cert, key: key, log: log}
	st, err := s.stamps()
	if err != nil {
		return nil, err
	}
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %w", cert, key, err)
	}
	s.current, s.stamp, s.checked = &c, st, time.Now()
	return s, nil
}

func (s *Source) stamps() ([2]stamp, error) {
	var st [2]stamp
	for i, p := range []string{s.cert, s.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return st, err
		}
		st[i] = stamp{fi.ModTime(), fi.Size()}
	}
	return st, nil
}

// GetCertificate is tls.Config's: the certificate, read again first if
// its files changed.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.checked) >= CheckEvery {
		s.checked = now
		s.reload()
	}
	return s.current, nil
}

// reload reads the files again if they changed since they were read.
func (s *Source) reload() {
	st, err := s.stamps()
	if err != nil || st == s.stamp {
		if err != nil && st != s.failed {
			s.failed = st
			s.log.Warn("the TLS certificate's files could not be looked at; the one loaded is kept", "cert", s.cert, "key", s.key, "err", err)
		}
		return
	}
	c, err := tls.LoadX509KeyPair(s.cert, s.key)
	if err != nil {
		if st != s.failed {
			s.failed = st
			s.log.Warn("the TLS certificate's files changed but do not load; the one loaded is kept", "cert", s.cert, "key", s.key, "err", err)
		}
		return
	}
	s.current, s.stamp = &c, st
	s.log.Info("the TLS certificate was read again", "cert", s.cert)
}
