package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// MaxSecretSize is the largest secret file Secret.Read accepts, in bytes.
// A credential that goes into an HTTP header is far smaller; the bound
// stops a path that names a log file or a device from being read whole.
const MaxSecretSize = 64 << 10

// secretKeys are the allowed keys of a secret, sorted.
var secretKeys = []string{"env", "file"}

// ErrSecret is the class of every error Secret.Read returns: the secret's
// value is not available on the host. It belongs to errdefs.ErrUnavailable:
// the operator may yet provide it.
var ErrSecret = errdefs.New(errdefs.ErrUnavailable, "secret unavailable")

// Secret says where the host keeps a credential. The file names the
// source, never the value, and Read fetches the value each time it is
// called, so a rotated credential is picked up without a restart and the
// value is never part of a Config.
type Secret struct {
	// Name is the secret's key in the file.
	Name string
	// Env names the environment variable of the airlock process that
	// holds the value; "" when File is set.
	Env string
	// File is the absolute, clean path of a file that holds the value; ""
	// when Env is set.
	File string
	// Line is the line of the secret's key, for later error messages.
	Line int
}

// SecretError is an error of Secret.Read. Its text names the secret and
// where its value comes from, and never holds the value or any part of it:
// such errors are logged, and a log is no place for a credential.
type SecretError struct {
	// Secret is the secret's name.
	Secret string
	// Problem says what is wrong, naming the variable or file.
	Problem string
	// Err is the underlying error, if any, such as an *fs.PathError.
	Err error
}

// Error formats e as `secret "name": problem: err`.
func (e *SecretError) Error() string {
	s := "secret " + quote(e.Secret) + ": " + e.Problem
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error, if any.
func (e *SecretError) Unwrap() error { return e.Err }

// Is reports whether target is ErrSecret or its class, so that every
// *SecretError belongs to them whatever its underlying error.
func (e *SecretError) Is(target error) bool { return errors.Is(ErrSecret, target) }

// Read returns the secret's current value: the environment variable's
// value, or the file's content less one trailing newline ("\n" or
// "\r\n"). An unset or empty variable, an empty, unreadable or oversized
// file or one that is not a regular file, and a value holding a control character other than tab are
// errors (*SecretError, matching ErrSecret). Control characters are
// refused because the value goes into an HTTP header, where CR and LF
// would end the header and start another of the sandbox's choosing, and
// where NUL and the rest are invalid.
func (s *Secret) Read() (string, error) {
	var (
		v    string
		from string
	)
	switch {
	case s.Env != "":
		from = "environment variable " + s.Env
		var ok bool
		if v, ok = os.LookupEnv(s.Env); !ok {
			return "", s.err(from+" is not set", nil)
		}
	case s.File != "":
		from = "file " + s.File
		data, err := readSmall(s.File, MaxSecretSize)
		if err != nil {
			// The error is the os package's, which names the path and
			// the failed operation but never the file's content.
			return "", s.err("cannot read "+from, err)
		}
		if len(data) > MaxSecretSize {
			return "", s.err(fmt.Sprintf("%s is larger than %d KiB", from, MaxSecretSize>>10), nil)
		}
		v = string(data)
		if t, ok := strings.CutSuffix(v, "\n"); ok {
			v = strings.TrimSuffix(t, "\r")
		}
	default:
		return "", s.err("no source (neither env nor file is set)", nil)
	}
	if v == "" {
		return "", s.err(from+" is empty", nil)
	}
	if strings.IndexFunc(v, isHeaderControl) >= 0 {
		// Not even the position is given: it would tell a log reader
		// something about the value.
		return "", s.err(from+" holds a line break or other control character, which cannot go into an HTTP header", nil)
	}
	return v, nil
}

// err returns a *SecretError for s.
func (s *Secret) err(problem string, err error) error {
	return &SecretError{Secret: s.Name, Problem: problem, Err: err}
}

// readSmall reads at most limit+1 bytes of the regular file at path, so
// that the caller can tell a file of exactly limit bytes from a larger one.
// Other kinds of file are refused before they are opened: opening a FIFO
// would block the call until some writer appears, and a device could
// stream forever.
func readSmall(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errNotRegular}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// errNotRegular is the error of reading a secret file that is a directory,
// device, FIFO or socket.
var errNotRegular = errors.New("not a regular file")

// isHeaderControl reports whether r may not appear in an HTTP header
// value: the ASCII control characters other than tab, and DEL.
func isHeaderControl(r rune) bool {
	return r < ' ' && r != '\t' || r == 0x7f
}

// secrets parses the secrets mapping into c.
func (p *parser) secrets(n *yaml.Node, c *Config) error {
	fs, err := p.fields(n, "secrets", "a mapping of secret names to their sources", nil)
	if err != nil {
		return err
	}
	for _, f := range fs {
		s, err := p.secret(f)
		if err != nil {
			return err
		}
		c.Secrets[s.Name] = s
	}
	return nil
}

// secret parses one entry of secrets: exactly one of env and file.
func (p *parser) secret(sf field) (*Secret, error) {
	name := sf.name
	at := join("secrets", name)
	if !validToolName(name) {
		return nil, p.errAt(sf.key, at, "invalid secret name %s: use 1-64 letters, digits, '_' and '-', starting with a letter or digit", quote(name))
	}
	s := &Secret{Name: name, Line: sf.key.Line}
	fs, err := p.fields(sf.val, at, "a mapping with env or file", secretKeys)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		sub := join(at, f.name)
		if len(fs) > 1 {
			// Two sources would leave the reader to guess which wins.
			return nil, p.errAt(fs[1].key, join(at, fs[1].name), `give "env" or "file", not both`)
		}
		switch f.name {
		case "env":
			if s.Env, err = p.str(f.val, sub); err == nil && !validEnvName(s.Env) {
				err = p.errAt(f.val, sub, "invalid environment variable name %s: use letters, digits and '_', not starting with a digit", quote(s.Env))
			}
		case "file":
			s.File, err = p.absPath(f.val, sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(fs) == 0 {
		return nil, p.errAt(sf.key, at, `missing its source: give "env" (an environment variable name) or "file" (an absolute path)`)
	}
	return s, nil
}
