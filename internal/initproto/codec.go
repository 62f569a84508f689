package initproto

import (
	"fmt"

	"github.com/airlockhq/airlock/internal/wire"
)

// kinds are the wire codes of the message kinds, in a fixed order.
var kinds = [...]Kind{KindSetup, KindReady, KindFail, KindExec, KindStarted, KindExit}

// Marshal encodes m. Every message starts with the protocol Version, so
// that an end of another build is told so rather than misread.
func Marshal(m *Message) ([]byte, error) {
	code := -1
	for i, k := range kinds {
		if k == m.Kind {
			code = i
		}
	}
	if code < 0 {
		return nil, fmt.Errorf("encode: unknown message kind %q", m.Kind)
	}
	w := &wire.Writer{B: make([]byte, 0, 256)}
	w.Uint(Version)
	w.Uint(uint64(code))
	w.Uint(m.ID)
	w.Int(int64(m.Pid))
	w.Int(int64(m.Status))
	w.Int(int64(m.Errno))
	w.String(m.Error)
	w.Bool(m.Setup != nil)
	if c := m.Setup; c != nil {
		w.String(c.RootDir)
		w.String(c.ScratchDir)
		w.String(c.Hostname)
		w.Int(int64(c.UID))
		w.Int(int64(c.GID))
		w.Int(int64(c.InitUID))
		w.Int(c.DiskBytes)
		w.Int(c.DiskInodes)
		w.Uint(uint64(len(c.Binds)))
		for _, b := range c.Binds {
			w.String(b.Source)
			w.String(b.Target)
			w.Bool(b.File)
		}
		w.Uint(uint64(len(c.Symlinks)))
		for _, s := range c.Symlinks {
			w.String(s.Target)
			w.String(s.Path)
		}
		w.Uint(uint64(len(c.Files)))
		for _, f := range c.Files {
			w.String(f.Path)
			w.String(f.Data)
			w.Uint(uint64(f.Mode))
		}
		w.Strings(c.Devices)
		w.Uint(uint64(len(c.Rlimits)))
		for _, r := range c.Rlimits {
			w.Int(int64(r.Resource))
			w.Uint(r.Cur)
			w.Uint(r.Max)
		}
		w.String(c.Workdir)
		w.Bytes(c.Seccomp)
		w.Bool(c.Image != nil)
		if c.Image != nil {
			w.Bool(c.Image.Writable)
		}
		w.Bool(c.NoSeccomp)
		w.Bool(c.NoLandlock)
	}
	w.Bool(m.Exec != nil)
	if e := m.Exec; e != nil {
		w.Strings(e.Argv)
		w.Strings(e.Env)
		w.String(e.Dir)
	}
	return w.B, nil
}

// Unmarshal decodes one message. It refuses a message of another protocol
// version (ErrVersion), an unknown kind, and any malformed or trailing
// bytes.
func Unmarshal(b []byte) (*Message, error) {
	r := wire.NewReader(b)
	if v := r.Uint(); r.Err() == nil && v != Version {
		return nil, fmt.Errorf("%w: the other end speaks protocol %d, this one %d", ErrVersion, v, Version)
	}
	code := r.Uint()
	if r.Err() == nil && code >= uint64(len(kinds)) {
		return nil, fmt.Errorf("decode: unknown message kind %d", code)
	}
	m := &Message{}
	if r.Err() == nil {
		m.Kind = kinds[code]
	}
	m.ID = r.Uint()
	m.Pid = int(r.Int())
	m.Status = int(r.Int())
	m.Errno = int(r.Int())
	m.Error = r.String()
	if r.Bool() {
		c := &Setup{}
		c.RootDir = r.String()
		c.ScratchDir = r.String()
		c.Hostname = r.String()
		c.UID = int(r.Int())
		c.GID = int(r.Int())
		c.InitUID = int(r.Int())
		c.DiskBytes = r.Int()
		c.DiskInodes = r.Int()
		if n := r.Count(); n > 0 {
			c.Binds = make([]Bind, n)
			for i := range c.Binds {
				c.Binds[i] = Bind{Source: r.String(), Target: r.String(), File: r.Bool()}
			}
		}
		if n := r.Count(); n > 0 {
			c.Symlinks = make([]Symlink, n)
			for i := range c.Symlinks {
				c.Symlinks[i] = Symlink{Target: r.String(), Path: r.String()}
			}
		}
		if n := r.Count(); n > 0 {
			c.Files = make([]File, n)
			for i := range c.Files {
				c.Files[i] = File{Path: r.String(), Data: r.String(), Mode: uint32(r.Uint())}
			}
		}
		c.Devices = r.Strings()
		if n := r.Count(); n > 0 {
			c.Rlimits = make([]Rlimit, n)
			for i := range c.Rlimits {
				c.Rlimits[i] = Rlimit{Resource: int(r.Int()), Cur: r.Uint(), Max: r.Uint()}
			}
		}
		c.Workdir = r.String()
		c.Seccomp = r.Bytes()
		if r.Bool() {
			c.Image = &ImageRoot{Writable: r.Bool()}
		}
		c.NoSeccomp = r.Bool()
		c.NoLandlock = r.Bool()
		m.Setup = c
	}
	if r.Bool() {
		m.Exec = &Exec{Argv: r.Strings(), Env: r.Strings(), Dir: r.String()}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return m, nil
}
