package initproto

import (
	"fmt"

	"github.com/airlockhq/airlock/internal/wire"
)

// kinds are the wire codes of the message kinds, in a fixed order.
var kinds = [...]Kind{KindReady, KindFail, KindExec, KindStarted, KindExit, KindSignal, KindDescriptors, KindResize}

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
	w.Int(int64(m.Signal))
	w.Bool(m.Exec != nil)
	if e := m.Exec; e != nil {
		w.Strings(e.Argv)
		w.Strings(e.Env)
		w.String(e.Dir)
		w.Bool(e.TTY)
		w.Uint(uint64(e.Rows))
		w.Uint(uint64(e.Cols))
	}
	w.Int(int64(m.Count))
	w.Uint(uint64(m.Rows))
	w.Uint(uint64(m.Cols))
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
	m.Signal = int(r.Int())
	if m.Signal < 0 || m.Signal > 64 {
		return nil, fmt.Errorf("decode: signal %d out of range", m.Signal)
	}
	if r.Bool() {
		m.Exec = &Exec{Argv: r.Strings(), Env: r.Strings(), Dir: r.String(), TTY: r.Bool()}
		m.Exec.Rows, m.Exec.Cols = r.Uint16(), r.Uint16()
	}
	m.Count = int(r.Int())
	if m.Count < 0 {
		return nil, fmt.Errorf("decode: negative count %d", m.Count)
	}
	m.Rows, m.Cols = r.Uint16(), r.Uint16()
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return m, nil
}
