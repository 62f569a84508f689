package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/tokens"
)

func newConsole(t *testing.T) (*Console, http.Handler) {
	t.Helper()
	t.Setenv("CONSOLE_UNIT_TOKEN", "unit-token-0123456789abcdef")
	cfg, err := config.Parse("t.yaml", []byte("server:\n  tokens:\n    - {name: a, secret: a, tools: [sh]}\nsecrets:\n  a: {env: CONSOLE_UNIT_TOKEN}\ntools:\n  sh: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tokens.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := New(func() *tokens.Set { return ts })
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "the API", http.StatusTeapot) })
	return c, c.Handler(next)
}

func do(h http.Handler, method, target string, body string, hdr map[string]string) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestLogins: a code works once; a token logs in as its caller; a wrong
// one, another origin's form, or a body too big log nobody in; the API
// is not the console's to answer.
func TestLogins(t *testing.T) {
	c, h := newConsole(t)
	code := c.Code()
	w := do(h, "GET", "/console/login?code="+url.QueryEscape(code), "", nil)
	ck := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("a code's login: %d %v", w.Code, ck)
	}
	r := httptest.NewRequest("GET", "/v1/ps", nil)
	r.AddCookie(ck[0])
	if tok, _, ok := c.Session(r); !ok || tok != nil {
		t.Errorf("the code's session is %v %v, want the local operator", tok, ok)
	}
	// A change needs the console's header too.
	r = httptest.NewRequest("DELETE", "/v1/runs/r_x", nil)
	r.AddCookie(ck[0])
	if _, _, ok := c.Session(r); ok {
		t.Error("a DELETE with the cookie alone was taken")
	}
	r.Header.Set(Header, "1")
	if tok, _, ok := c.Session(r); !ok || tok != nil {
		t.Error("a DELETE with the cookie and the header was refused")
	}
	if w := do(h, "GET", "/console/login?code="+url.QueryEscape(code), "", nil); len(w.Result().Cookies()) != 0 || !strings.Contains(w.Header().Get("Location"), "login=failed") {
		t.Error("a code worked twice")
	}
	for name, tt := range map[string]struct {
		body string
		hdr  map[string]string
		ok   bool
	}{
		"token":          {"token=unit-token-0123456789abcdef", nil, true},
		"same origin":    {"token=unit-token-0123456789abcdef", map[string]string{"Origin": "http://example.com"}, true},
		"wrong token":    {"token=nope", nil, false},
		"another origin": {"token=unit-token-0123456789abcdef", map[string]string{"Origin": "http://evil.example"}, false},
		"null origin":    {"token=unit-token-0123456789abcdef", map[string]string{"Origin": "null"}, false},
		"too big":        {"token=unit-token-0123456789abcdef&x=" + strings.Repeat("x", maxForm), nil, false},
	} {
		w := do(h, "POST", "http://example.com/console/login", tt.body, tt.hdr)
		if got := len(w.Result().Cookies()) == 1; got != tt.ok {
			t.Errorf("%s: logged in %v, want %v (%d)", name, got, tt.ok, w.Code)
		}
	}
	if w := do(h, "GET", "/v1/ps", "", nil); w.Code != http.StatusTeapot {
		t.Errorf("the API went to the console: %d", w.Code)
	}
	if w := do(h, "GET", "/console/", "", nil); w.Code != 200 || !strings.Contains(w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("the page: %d %v", w.Code, w.Header())
	}
}

// TestBounded: codes and sessions are bounded, and an expired session
// is no session.
func TestBounded(t *testing.T) {
	c, _ := newConsole(t)
	for range maxCodes + 10 {
		c.Code()
	}
	if len(c.codes) != maxCodes {
		t.Errorf("%d codes kept, want %d", len(c.codes), maxCodes)
	}
	var last string
	for range maxSessions + 10 {
		last = c.login("")
	}
	if len(c.sessions) != maxSessions {
		t.Errorf("%d sessions kept, want %d", len(c.sessions), maxSessions)
	}
	c.sessions[last].expires = time.Now().Add(-time.Second)
	r := httptest.NewRequest("GET", "/v1/ps", nil)
	r.AddCookie(&http.Cookie{Name: Cookie, Value: last})
	if _, _, ok := c.Session(r); ok {
		t.Error("an expired session was taken")
	}
}

// TestTokenRemoved: a token's session is the token as it is now: once a
// reload removes the token, its sessions are gone.
func TestTokenRemoved(t *testing.T) {
	t.Setenv("CONSOLE_UNIT_TOKEN", "unit-token-0123456789abcdef")
	load := func(text string) *tokens.Set {
		cfg, err := config.Parse("t.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		ts, err := tokens.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	cur := load("server:\n  tokens:\n    - {name: a, secret: a, tools: [sh]}\nsecrets:\n  a: {env: CONSOLE_UNIT_TOKEN}\ntools:\n  sh: {}\n")
	c := New(func() *tokens.Set { return cur })
	w := do(c.Handler(http.NotFoundHandler()), "POST", "http://example.com/console/login", "token=unit-token-0123456789abcdef", nil)
	ck := w.Result().Cookies()
	if len(ck) != 1 {
		t.Fatalf("no login: %d", w.Code)
	}
	r := httptest.NewRequest("GET", "/v1/ps", nil)
	r.AddCookie(ck[0])
	if tok, _, ok := c.Session(r); !ok || tok == nil || tok.Name != "a" {
		t.Fatalf("the token's session = %v %v", tok, ok)
	}
	cur = load("server:\n  tokens:\n    - {name: a, secret: a, tools: [sh, py]}\nsecrets:\n  a: {env: CONSOLE_UNIT_TOKEN}\ntools:\n  sh: {}\n  py: {}\n")
	if tok, _, ok := c.Session(r); !ok || len(tok.Tools) != 2 {
		t.Errorf("after a reload that widened the token, its session = %+v %v; want the token as it is now", tok, ok)
	}
	cur = load("tools:\n  sh: {}\n")
	if tok, _, ok := c.Session(r); ok {
		t.Errorf("after a reload that removed the token, its session is still %v", tok)
	}
}
