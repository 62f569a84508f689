package spawner

import (
	"fmt"
	"strconv"
	"strings"

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

// String renders the Config as the spawner's argv[1]: "VERSION HOMETASKS".
func (c Config) String() string {
	return strconv.Itoa(c.Version) + " " + strconv.Itoa(c.HomeTasks)
}

// ParseConfig reads what Config.String wrote.
func ParseConfig(s string) (Config, error) {
	v, h, ok := strings.Cut(s, " ")
	var c Config
	var err1, err2 error
	c.Version, err1 = strconv.Atoi(v)
	c.HomeTasks, err2 = strconv.Atoi(h)
	if !ok || err1 != nil || err2 != nil {
		return Config{}, fmt.Errorf("bad config %q", s)
	}
	return c, nil
}
