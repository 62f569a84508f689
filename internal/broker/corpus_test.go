package broker

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/result"
)

// TestBypassCorpus is the broker's regression corpus: every way a
// sandbox tried to reach an operation no one declared, to send the
// upstream something it could route or slice by, or to get the
// credential back. Each row is an attack (a raw request, byte for byte),
// the answer it must meet, the reason its refusal gives and the code its
// event gives, whether the upstream was reached at all and what it must
// not have seen. After every row the answer, headers and body, holds the
// secret in none of the forms a hostile upstream echoes it in. The
// egress proxy's corpus is in internal/egress; the MCP surface's is in
// internal/daemon.
func TestBypassCorpus(t *testing.T) {
	u := newUpstream(t, false)
	f := attach(t, svcYAML(u, ""))
	big := strings.Repeat("x", 2048)
	const get = "GET /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\n"
	tests := []struct {
		name   string
		secret string // the secret the broker holds, when not the usual one
		req    string
		status int
		// code is the refusal's event's, and reason is in the refusal's
		// body; both empty for a call that is allowed (with what it must
		// not carry stripped).
		code    string
		reason  string
		reached bool
		// absent are request headers the upstream must not have seen.
		absent []string
	}{
		// Operations no one declared.
		{name: "unlisted operation", req: "DELETE /gh/repos/o/r HTTP/1.1\r\nHost: b\r\n\r\n", status: 403, code: result.BrokerNoOperation, reason: "no operation matches DELETE /repos/o/r"},
		{name: "unlisted path", req: "GET /gh/admin HTTP/1.1\r\nHost: b\r\n\r\n", status: 403, code: result.BrokerNoOperation, reason: "no operation"},
		{name: "unknown service", req: "GET /aws/x HTTP/1.1\r\nHost: b\r\n\r\n", status: 403, code: result.BrokerNoService, reason: "no service"},
		{name: "no service", req: "GET / HTTP/1.1\r\nHost: b\r\n\r\n", status: 404, code: result.BrokerNoService, reason: "name a service"},
		{name: "unlisted query", req: "GET /gh/repos/o/r?admin=1 HTTP/1.1\r\nHost: b\r\n\r\n", status: 403, code: result.BrokerQuery, reason: `query parameter "admin"`},

		// Paths that would normalise to another operation.
		{name: "dot dot", req: "GET /gh/repos/o/r/../../admin HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: ".."},
		{name: "encoded dot dot", req: "GET /gh/repos/o/%2e%2e/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "mixed encoded dot", req: "GET /gh/repos/o/.%2E/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "encoded slash", req: "GET /gh/repos/o%2Fx/r/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "double slash", req: "GET /gh//repos/o/r/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "backslash", req: "GET /gh/repos/o\\r/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "encoded nul", req: "GET /gh/repos/o%00/r/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "path"},
		{name: "absolute form", req: "GET http://127.0.0.3/gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\n\r\n", status: 400, code: result.BrokerBadPath, reason: "absolute"},

		// Headers that choose another method, route or body reading.
		{name: "method override", req: get + "X-HTTP-Method-Override: DELETE\r\n\r\n", status: 400, code: result.BrokerOverride, reason: "override"},
		{name: "two content types", req: "POST /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", status: 400, code: result.BrokerContentType, reason: "Content-Type"},
		{name: "wrong content type", req: "POST /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi", status: 415, code: result.BrokerContentType, reason: "content type"},
		{name: "path-override headers stripped", req: get + "X-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\nX-Original-Host: admin.internal\r\nX-Forwarded-Host: admin.internal\r\n\r\n",
			status: 200, reached: true, absent: []string{"X-Original-Url", "X-Rewrite-Url", "X-Original-Host", "X-Forwarded-Host"}},
		{name: "caller's own credentials stripped", req: get + "Authorization: Bearer stolen\r\nCookie: session=stolen\r\nX-Api-Key: stolen\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
			status: 200, reached: true, absent: []string{"Cookie", "X-Api-Key", "Proxy-Authorization"}},

		// Bodies past their caps.
		{name: "oversized body", req: "POST /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: 2048\r\n\r\n" + big, status: 413, code: result.BrokerTooLarge, reason: "cap"},
		{name: "oversized chunked body", req: "POST /gh/repos/o/r/issues HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + big + "\r\n0\r\n\r\n", status: 413, code: result.BrokerTooLarge, reason: "cap"},

		// Getting the secret back.
		{name: "reflected in every form", req: "GET /gh/leak HTTP/1.1\r\nHost: b\r\n\r\n", status: 200, reached: true},
		{name: "a slice of the answer", req: "GET /gh/ranged HTTP/1.1\r\nHost: b\r\nRange: bytes=0-11\r\n\r\n", status: 200, reached: true, absent: []string{"Range"}},
		{name: "conditional and ranged validators stripped", req: "GET /gh/ranged HTTP/1.1\r\nHost: b\r\nIf-Range: x\r\nIf-None-Match: *\r\nIf-Modified-Since: Mon, 02 Jan 2006 15:04:05 GMT\r\nRange: bytes=12-23\r\n\r\n",
			status: 200, reached: true, absent: []string{"Range", "If-Range", "If-None-Match", "If-Modified-Since"}},
		{name: "compressed answer", req: "GET /gh/gzip HTTP/1.1\r\nHost: b\r\n\r\n", status: 502, code: result.BrokerEncoding, reason: "encoding", reached: true},
		// An empty Content-Encoding, then gzip: every instance counts.
		{name: "compressed answer behind an empty encoding", req: "GET /gh/gzip2 HTTP/1.1\r\nHost: b\r\n\r\n", status: 502, code: result.BrokerEncoding, reason: "gzip encoding", reached: true},
		// A secret this short could not be kept out of answers.
		{name: "short secret", secret: "abc1234", req: get + "\r\n", status: 502, code: result.BrokerShortSecret, reason: "shorter than 8 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := secret
			if tt.secret != "" {
				s = tt.secret
				t.Setenv("TEST_BROKER_SECRET", s)
			}
			before, n := u.hits.Load(), len(f.events())
			resp, body := f.raw(t, tt.req)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.reason) || (tt.reason != "" && !strings.HasPrefix(body, "airlock broker")) {
				t.Fatalf("got %d %q, want %d mentioning %q", resp.StatusCode, body, tt.status, tt.reason)
			}
			ev := f.lastEvent(t, n+1)
			if ev.Allow != (tt.code == "") || ev.Status != tt.status || ev.Code != tt.code || (tt.code != "" && ev.Reason == "") {
				t.Fatalf("event %+v", ev)
			}
			if reached := u.hits.Load() > before; reached != tt.reached {
				t.Fatalf("upstream reached: %v", reached)
			}
			if tt.reached {
				got := u.last()
				if got.Header.Get("Authorization") != "Bearer "+s {
					t.Errorf("the upstream got Authorization %q", got.Header.Get("Authorization"))
				}
				for _, h := range tt.absent {
					if v := got.Header.Values(h); len(v) > 0 {
						t.Errorf("the caller's %s reached the upstream: %q", h, v)
					}
				}
			}
			answer := body + fmt.Sprint(resp.Header)
			for _, form := range append(hostileForms(s), [2]string{"plain", s}, [2]string{"query", queryEscape(s)}, [2]string{"base64", b64(s)}) {
				if strings.Contains(answer, form[1]) {
					t.Errorf("the answer holds the secret in its %s form:\n%s", form[0], answer)
				}
			}
			if resp.StatusCode == http.StatusOK && tt.name == "reflected in every form" && !strings.Contains(body, "plain=[REDACTED]") {
				t.Errorf("the echo was not redacted but dropped: %q", body)
			}
		})
	}
}
