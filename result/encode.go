package result

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"
)

// Encoded is a result ready to be written as JSON (the bytes json.Marshal
// gives) with its output encoded straight from the result's buffers as it
// is written: a result holding megabytes of captured output is answered
// without copies of it (json.Marshal would make several: a string, the
// escaped text, the encoder's growing buffer and its return value).
type Encoded struct {
	head, tail     []byte
	stdout, stderr Output
}

// placeholder is how the result's empty output fields encode; a quote
// inside a string value is escaped, so this appears only as the fields.
var placeholder = []byte(`"stdout":"","stderr":""`)

// Encode prepares r to be written.
func Encode(r *Result) (*Encoded, error) {
	cp := *r
	cp.Stdout, cp.Stderr = nil, nil
	b, err := json.Marshal(&cp)
	if err != nil {
		return nil, err
	}
	i := bytes.Index(b, placeholder)
	if i < 0 {
		return nil, errors.New("result: no output fields in the encoding")
	}
	return &Encoded{head: b[:i], tail: b[i+len(placeholder):], stdout: r.Stdout, stderr: r.Stderr}, nil
}

// Len is the length WriteTo writes.
func (e *Encoded) Len() int64 {
	return int64(len(e.head)+len(e.tail)+len(`"stdout":,"stderr":`)) + e.stdout.EncodedLen() + e.stderr.EncodedLen()
}

// WriteTo writes the JSON encoding of the result to w.
func (e *Encoded) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	_, _ = cw.Write(e.head)
	_, _ = io.WriteString(cw, `"stdout":`)
	_ = e.stdout.WriteJSON(cw)
	_, _ = io.WriteString(cw, `,"stderr":`)
	_ = e.stderr.WriteJSON(cw)
	_, _ = cw.Write(e.tail)
	return cw.n, cw.err
}

// countWriter counts what it writes and keeps the first error, after
// which it writes nothing.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
	return n, err
}

const hexDigits = "0123456789abcdef"

// escape is the escape of a byte that needs one in a JSON string, as
// encoding/json writes it ("" for one that needs none). <, > and & are
// escaped as json.Marshal does, so the encodings are the same bytes.
func escape(c byte) string {
	switch c {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	if c < 0x20 || c == '<' || c == '>' || c == '&' {
		return `\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
	}
	return ""
}

// lineSep and paraSep (U+2028, U+2029) are escaped by json.Marshal.
var lineSep, paraSep = []byte("\u2028"), []byte("\u2029")

// EncodedLen is the length of o's JSON encoding (see MarshalJSON).
func (o Output) EncodedLen() int64 {
	if !utf8.Valid(o) {
		return int64(len(`{"base64":""}`) + base64.StdEncoding.EncodedLen(len(o)))
	}
	return JSONStringLen(o)
}

// WriteJSON writes o's JSON encoding (see MarshalJSON) to w, a piece at a
// time, without a copy of o.
func (o Output) WriteJSON(w io.Writer) error {
	if !utf8.Valid(o) {
		cw := &countWriter{w: w}
		_, _ = io.WriteString(cw, `{"base64":"`)
		enc := base64.NewEncoder(base64.StdEncoding, cw)
		_, _ = enc.Write(o)
		_ = enc.Close()
		_, _ = io.WriteString(cw, `"}`)
		return cw.err
	}
	return WriteJSONString(w, o)
}

// JSONStringLen is the length of the JSON string of pieces, valid UTF-8
// each, one after another, as WriteJSONString writes it.
func JSONStringLen(pieces ...[]byte) int64 {
	n := int64(2)
	for _, p := range pieces {
		for i := 0; i < len(p); i++ {
			c := p[i]
			if e := escape(c); e != "" {
				n += int64(len(e))
				continue
			}
			if c == 0xe2 && (bytes.HasPrefix(p[i:], lineSep) || bytes.HasPrefix(p[i:], paraSep)) {
				n += int64(len(`\u2028`))
				i += 2
				continue
			}
			n++
		}
	}
	return n
}

// WriteJSONString writes the JSON string of pieces, valid UTF-8 each, one
// after another, escaped as json.Marshal escapes a string, to w a piece at
// a time: a string of megabytes is written without a copy of it.
func WriteJSONString(w io.Writer, pieces ...[]byte) error {
	cw := &countWriter{w: w}
	// Room for the pieces as they are (most need no escape) and the
	// quotes, at most 32 KiB: it is flushed when full. An empty output,
	// most commands' stderr, costs a few bytes, not the whole 32 KiB.
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	buf := make([]byte, 0, min(n+16, 32<<10))
	buf = append(buf, '"')
	for _, p := range pieces {
		for i := 0; i < len(p); i++ {
			if len(buf) > cap(buf)-8 {
				_, _ = cw.Write(buf)
				buf = buf[:0]
			}
			c := p[i]
			if e := escape(c); e != "" {
				buf = append(buf, e...)
				continue
			}
			if c == 0xe2 && bytes.HasPrefix(p[i:], lineSep) {
				buf, i = append(buf, `\u2028`...), i+2
				continue
			}
			if c == 0xe2 && bytes.HasPrefix(p[i:], paraSep) {
				buf, i = append(buf, `\u2029`...), i+2
				continue
			}
			buf = append(buf, c)
		}
	}
	buf = append(buf, '"')
	_, _ = cw.Write(buf)
	return cw.err
}
