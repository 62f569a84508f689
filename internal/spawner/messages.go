package spawner

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/linux/forkexec"
	"github.com/airlockhq/airlock/internal/wire"
)

// The spawner's messages in the encoding of internal/wire, like init's.

// Marshal encodes the Hello.
func (h *Hello) Marshal() []byte {
	w := &wire.Writer{}
	w.Uint(uint64(h.Version))
	return w.B
}

// Unmarshal decodes a Hello.
func (h *Hello) Unmarshal(b []byte) error {
	r := wire.NewReader(b)
	h.Version = int(r.Uint())
	return r.Done()
}

// Marshal encodes the Request.
func (q *Request) Marshal() []byte {
	w := &wire.Writer{}
	w.Uint(q.ID)
	w.String(q.Path)
	w.String(q.Arg0)
	w.Strings(q.Env)
	w.Int(int64(q.IDBase))
	w.Int(int64(q.IDSize))
	w.Bool(q.CgroupDir)
	w.Bool(q.Prog != nil)
	if p := q.Prog; p != nil {
		w.Uint(uint64(len(p.Ops)))
		for _, op := range p.Ops {
			w.Uint(uint64(op.Trap))
			for _, a := range op.Args {
				w.Uint(uint64(a.Kind))
				w.Uint(uint64(a.Index))
				w.Uint(a.Imm)
			}
			w.Int(int64(op.Save))
			w.Bool(op.Whole)
			w.Uint(uint64(op.Skip))
			for _, b := range op.Else {
				w.Uint(uint64(b.Errno))
				w.Uint(uint64(b.Skip))
			}
			w.String(op.What)
		}
		w.Uint(uint64(len(p.Blobs)))
		for _, b := range p.Blobs {
			w.Bytes(b)
		}
		w.Uint(uint64(p.NFiles))
	}
	return w.B
}

// Unmarshal decodes a Request.
func (q *Request) Unmarshal(b []byte) error {
	r := wire.NewReader(b)
	q.ID = r.Uint()
	q.Path = r.String()
	q.Arg0 = r.String()
	q.Env = r.Strings()
	q.IDBase = int(r.Int())
	q.IDSize = int(r.Int())
	q.CgroupDir = r.Bool()
	if r.Bool() {
		p := &forkexec.Prog{}
		if n := r.Count(); n > 0 {
			p.Ops = make([]forkexec.Op, n)
			for i := range p.Ops {
				op := &p.Ops[i]
				op.Trap = uintptr(r.Uint())
				for j := range op.Args {
					op.Args[j] = forkexec.Arg{Kind: forkexec.ArgKind(r.Uint()), Index: uint32(r.Uint()), Imm: r.Uint()}
				}
				op.Save = int8(r.Int())
				op.Whole = r.Bool()
				op.Skip = uint8(r.Uint())
				for j := range op.Else {
					op.Else[j] = forkexec.Branch{Errno: syscall.Errno(r.Uint()), Skip: uint8(r.Uint())}
				}
				op.What = r.String()
			}
		}
		if n := r.Count(); n > 0 {
			p.Blobs = make([][]byte, n)
			for i := range p.Blobs {
				p.Blobs[i] = r.Bytes()
			}
		}
		// The files arrive as descriptors, after the request's own.
		n := r.Uint()
		if n > maxProgFiles {
			return fmt.Errorf("a program with %d files", n)
		}
		p.NFiles = int(n)
		q.Prog = p
	}
	return r.Done()
}

// Marshal encodes the Reply.
func (p *Reply) Marshal() []byte {
	w := &wire.Writer{}
	w.Uint(p.ID)
	w.Int(int64(p.Pid))
	w.String(p.Error)
	return w.B
}

// Unmarshal decodes a Reply.
func (p *Reply) Unmarshal(b []byte) error {
	r := wire.NewReader(b)
	p.ID = r.Uint()
	p.Pid = int(r.Int())
	p.Error = r.String()
	return r.Done()
}

// String renders the Config as the spawner's argv[1]: "VERSION HIERARCHIES".
func (c Config) String() string {
	return strconv.Itoa(c.Version) + " " + strconv.Itoa(c.Hierarchies)
}

// ParseConfig reads what Config.String wrote.
func ParseConfig(s string) (Config, error) {
	v, h, ok := strings.Cut(s, " ")
	var c Config
	var err1, err2 error
	c.Version, err1 = strconv.Atoi(v)
	c.Hierarchies, err2 = strconv.Atoi(h)
	if !ok || err1 != nil || err2 != nil {
		return Config{}, fmt.Errorf("bad config %q", s)
	}
	return c, nil
}
