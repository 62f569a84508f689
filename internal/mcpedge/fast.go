package mcpedge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcpserver"
	"github.com/airlockhq/airlock/result"
)

// The fast path of tools/call. The SDK's streamable transport hands each
// request from the HTTP handler to the session's connection, from there to
// the method's handler, and the answer back the same way as an event
// stream: about 0.4 ms of every call on the daemon's two cores, against
// the plain API's 0.2. The daemon answers the most common request itself
// when nothing in it needs the SDK: a single tools/call, on a session
// whose client has finished initializing, of a configured tool served by
// airlock's own handler (the very function the SDK would call), with no
// progress token (progress needs the event stream) and nothing else in
// its parameters. It answers with one JSON object, which the transport
// allows. Anything else, and any doubt, goes to the SDK unchanged.

// MaxFastBody is the largest request body the fast path looks at; a
// larger one goes to the SDK.
const MaxFastBody = 256 << 10

// mcpVersionHeader carries the MCP protocol version on every request
// after initialization.
const mcpVersionHeader = "Mcp-Protocol-Version"

// fastCall is a tools/call the fast path may answer.
type fastCall struct {
	id        json.RawMessage // a JSON number or string
	name      string
	arguments json.RawMessage // an object, or nil
}

// parseFastCall returns the call in body when it is exactly a single
// JSON-RPC tools/call request with a name, optional arguments and no
// metadata, sent as JSON by a client that accepts JSON answers.
func parseFastCall(h http.Header, body []byte) (fastCall, bool) {
	if ct, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || ct != "application/json" {
		return fastCall{}, false
	}
	// The SDK wants both; a client that does not send both gets its
	// answer from the SDK.
	if accept := strings.Join(h.Values("Accept"), ","); !strings.Contains(accept, "application/json") || !strings.Contains(accept, "text/event-stream") {
		return fastCall{}, false
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return fastCall{}, false // a batch, or not an object
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil || len(msg) != 4 {
		return fastCall{}, false
	}
	var version, method string
	if json.Unmarshal(msg["jsonrpc"], &version) != nil || version != "2.0" ||
		json.Unmarshal(msg["method"], &method) != nil || method != "tools/call" {
		return fastCall{}, false
	}
	id := bytes.TrimSpace(msg["id"])
	if !validID(id) {
		return fastCall{}, false
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(msg["params"], &params); err != nil || params == nil {
		return fastCall{}, false
	}
	c := fastCall{id: id}
	for k, v := range params {
		switch k {
		case "name":
			if json.Unmarshal(v, &c.name) != nil || c.name == "" {
				return fastCall{}, false
			}
		case "arguments":
			v = bytes.TrimSpace(v)
			if bytes.Equal(v, []byte("null")) {
				continue
			}
			if len(v) == 0 || v[0] != '{' {
				return fastCall{}, false
			}
			c.arguments = v
		default:
			// _meta (a progress token, and whatever later versions
			// carry there) and anything else: the SDK's.
			return fastCall{}, false
		}
	}
	if c.name == "" {
		return fastCall{}, false
	}
	return c, true
}

// validID reports whether b is a JSON-RPC request id: a string or a
// number (never null).
func validID(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	switch {
	case b[0] == '"':
		var s string
		return json.Unmarshal(b, &s) == nil
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		var n json.Number
		return json.Unmarshal(b, &n) == nil
	}
	return false
}

// peekBody reads up to max bytes of r's body and puts them back in front
// of the rest, so the SDK still reads the whole body. whole says the body
// ended within max.
func peekBody(r *http.Request, max int64) (b []byte, whole bool, err error) {
	if r.Body == nil {
		return nil, true, nil
	}
	b, err = io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, false, err
	}
	whole = int64(len(b)) <= max
	rest := io.Reader(bytes.NewReader(b))
	if !whole {
		rest = io.MultiReader(rest, r.Body)
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{rest, r.Body}
	return b, whole, nil
}

// isInitialized reports whether body is the client's notification that
// it has finished initializing.
func isInitialized(body []byte) bool {
	var msg struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	return json.Unmarshal(body, &msg) == nil && msg.Method == "notifications/initialized" && msg.ID == nil
}

// fastAnswer is a JSON-RPC response.
type fastAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// serveFastCall runs the call with the tool's handler and writes the
// answer as one JSON object, as the SDK would have written it.
func (d *Server) serveFastCall(w http.ResponseWriter, r *http.Request, h mcp.ToolHandler, c fastCall) {
	d.mcpFast.Add(1)
	// The sandbox goes once the whole answer is out (destroyLater hands
	// its destroy here), so that its teardown does not compete with the
	// answer for the processors.
	var after func()
	defer func() {
		if after != nil {
			after()
		}
	}()
	ctx := context.WithValue(r.Context(), afterAnswerKey{}, &after)
	ctx = mcpserver.WithLazyText(ctx)
	res, err := h(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: c.name, Arguments: c.arguments}})
	if err == nil && res != nil && writeLazyResult(w, c.id, res) {
		return
	}
	a := fastAnswer{JSONRPC: "2.0", ID: c.id}
	switch {
	case err != nil:
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		a.Error = je
	case res == nil:
		a.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no result"}
	default:
		if res.Content == nil {
			cp := *res
			cp.Content = []mcp.Content{} // never null, as the SDK does
			res = &cp
		}
		a.Result = res
	}
	b, err := json.Marshal(a)
	if err != nil {
		b, _ = json.Marshal(fastAnswer{JSONRPC: "2.0", ID: c.id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encode the result: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	_ = http.NewResponseController(w).Flush()
}

// writeLazyResult answers with a run's result whose text the handler left
// to the writer (mcpserver.LazyToolResult), encoding the text and the
// structured result's output straight from the run's buffers: calls
// answered at once each hold their output once (see capture.go), where
// encoding the answer whole held it several times over. It reports false,
// having written nothing, for any other result; the text is then filled
// in for the caller to write as usual.
func writeLazyResult(w http.ResponseWriter, id json.RawMessage, res *mcp.CallToolResult) bool {
	var r *result.Result
	switch sc := res.StructuredContent.(type) {
	case mcpserver.Structured:
		r = sc.Result
	case *result.Result:
		r = sc
	}
	if r == nil || len(res.Content) != 1 {
		return false
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || tc.Text != "" {
		return false
	}
	pieces, ok := mcpserver.ToolText(r)
	if !ok {
		return false
	}
	// Each part to be written from the buffers stands in the encoded
	// answer as a random marker, which the caller cannot have put in
	// anything of its own (the request's id).
	type part struct {
		mark  []byte
		at    int
		size  int64
		write func(io.Writer) error
	}
	parts := []*part{
		{size: result.JSONStringLen(pieces...), write: func(w io.Writer) error { return result.WriteJSONString(w, pieces...) }},
		{size: r.Stdout.EncodedLen(), write: r.Stdout.WriteJSON},
		{size: r.Stderr.EncodedLen(), write: r.Stderr.WriteJSON},
	}
	marks := make([]string, len(parts))
	for i, p := range parts {
		marks[i] = "airlock-" + rand.Text()
		p.mark = []byte(`"` + marks[i] + `"`)
	}
	cp := *res
	cp.Content = []mcp.Content{&mcp.TextContent{Text: marks[0]}}
	rr := *r
	rr.Stdout, rr.Stderr = result.Output(marks[1]), result.Output(marks[2])
	cp.StructuredContent = mcpserver.Structured{Result: &rr}
	frame, err := json.Marshal(fastAnswer{JSONRPC: "2.0", ID: id, Result: &cp})
	fill := func() bool {
		tc.Text = string(bytes.Join(pieces, nil))
		return false
	}
	if err != nil {
		return fill()
	}
	size := int64(len(frame))
	for _, p := range parts {
		if p.at = bytes.Index(frame, p.mark); p.at < 0 || bytes.Count(frame, p.mark) != 1 {
			return fill()
		}
		size += p.size - int64(len(p.mark))
	}
	slices.SortFunc(parts, func(a, b *part) int { return a.at - b.at })
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	from := 0
	for _, p := range parts {
		if _, err := w.Write(frame[from:p.at]); err != nil {
			return true
		}
		if err := p.write(w); err != nil {
			return true
		}
		from = p.at + len(p.mark)
	}
	_, _ = w.Write(frame[from:])
	_ = http.NewResponseController(w).Flush()
	return true
}
