// Package console serves the daemon's web console: a read-only picture
// of its pools, what runs now and its audit trail as it happens, drawn by
// a page embedded in the binary (no CDN, nothing fetched from elsewhere).
// The page reads the native API (docs/api.md) with the rights of whoever
// logged in: the local operator (a one-time login that `airlock console`
// asks for on the unix socket, as Jupyter's) sees everything; a token's
// holder sees what the token may.
//
// A browser cannot send a bearer token, so a login makes a session: a
// random cookie (HttpOnly, SameSite=Strict) the TCP listener takes in
// place of a token (a node's edge.Guard, a cluster's front). A request
// that changes anything with it
// must also carry the header X-Airlock-Console, which a page of another
// origin cannot add without the listener's consent: the cookie alone
// never kills a run.
package console

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/tokens"
)

//go:embed assets
var assets embed.FS

// Cookie is the session cookie's name; Header the header a changing
// request with it carries.
const (
	Cookie = "airlock_console"
	Header = "X-Airlock-Console"
)

// Bounds of the console's state: each is refused or evicted past them,
// so a caller cannot grow the daemon's memory by logging in.
const (
	// maxSessions bounds the sessions kept; the oldest goes first.
	maxSessions = 256
	// sessionLife is how long a session lasts from its login.
	sessionLife = 12 * time.Hour
	// maxCodes bounds the one-time codes outstanding; codeLife is how
	// long one may wait for its use.
	maxCodes = 16
	codeLife = 2 * time.Minute
	// maxForm bounds a login form's body.
	maxForm = 4 << 10
)

// Console holds the sessions and the one-time codes.
type Console struct {
	// tokens are the tokens a login form may present (a reload's).
	tokens func() *tokens.Set

	mu       sync.Mutex // guards sessions and codes
	sessions map[string]*session
	codes    map[string]time.Time
}

type session struct {
	// bearer is the token the session logged in with; "" for the local
	// operator.
	bearer  string
	expires time.Time
	made    time.Time
}

// New returns a console whose login form checks tokens' tokens.
func New(tokens func() *tokens.Set) *Console {
	return &Console{tokens: tokens, sessions: map[string]*session{}, codes: map[string]time.Time{}}
}

func random() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Code makes a one-time login code for the local operator: used once,
// within two minutes, it logs a browser in with the local socket's
// rights. Past maxCodes outstanding, the oldest is dropped.
func (c *Console) Code() string {
	code := random()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, exp := range c.codes {
		if now.After(exp) {
			delete(c.codes, k)
		}
	}
	if len(c.codes) >= maxCodes {
		var oldest string
		for k, exp := range c.codes {
			if oldest == "" || exp.Before(c.codes[oldest]) {
				oldest = k
			}
		}
		delete(c.codes, oldest)
	}
	c.codes[code] = now.Add(codeLife)
	return code
}

// useCode takes code if it is outstanding and fresh.
func (c *Console) useCode(code string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, exp := range c.codes {
		// Every code is compared, in constant time each.
		if subtle.ConstantTimeCompare([]byte(k), []byte(code)) == 1 {
			delete(c.codes, k)
			return time.Now().Before(exp)
		}
	}
	return false
}

// login makes a session of caller and returns its cookie's value.
func (c *Console) login(bearer string) string {
	id := random()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, s := range c.sessions {
		if now.After(s.expires) {
			delete(c.sessions, k)
		}
	}
	if len(c.sessions) >= maxSessions {
		var oldest string
		for k, s := range c.sessions {
			if oldest == "" || s.made.Before(c.sessions[oldest].made) {
				oldest = k
			}
		}
		delete(c.sessions, oldest)
	}
	c.sessions[id] = &session{bearer: bearer, made: now, expires: now.Add(sessionLife)}
	return id
}

// Session is who r's console session is: ok is false for none, an
// expired one, or a request that would change something without the
// console's header (a page of another origin cannot add it). token is
// the session's token as it is now, and bearer its value (for a front
// to send on); both are empty for the local operator, whose login only
// a node's unix socket gives.
func (c *Console) Session(r *http.Request) (token *config.Token, bearer string, ok bool) {
	ck, err := r.Cookie(Cookie)
	if err != nil || ck.Value == "" {
		return nil, "", false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(Header) == "" {
		return nil, "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	if s == nil || time.Now().After(s.expires) {
		return nil, "", false
	}
	if s.bearer == "" {
		return nil, "", true
	}
	// The token as it is now: a reload that removed it ends its
	// sessions, and one that changed its rights applies to them.
	now := c.tokens().Match(s.bearer)
	if now == nil {
		delete(c.sessions, ck.Value)
		return nil, "", false
	}
	return now, s.bearer, true
}

func setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: Cookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: maxAge})
}

// Handler serves /console/ in front of next (everything else): the page
// and its files, which hold no data, to anyone; the logins; the logout.
func (c *Console) Handler(next http.Handler) http.Handler {
	files, _ := fs.Sub(assets, "assets")
	static := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/console" && !strings.HasPrefix(r.URL.Path, "/console/") {
			next.ServeHTTP(w, r)
			return
		}
		// No page of another origin may frame it, and it runs no
		// script but its own.
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: under no-referrer a browser
		// sends its login form's Origin as "null", which the login
		// refuses.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/console":
			http.Redirect(w, r, "/console/", http.StatusSeeOther)
		case "/console/login":
			c.serveLogin(w, r)
		case "/console/whoami":
			// Who the session is, for the page; 401 without one.
			tok, _, ok := c.Session(r)
			if !ok {
				http.Error(w, "not logged in", http.StatusUnauthorized)
				return
			}
			h.Set("Content-Type", "application/json")
			name := "local"
			if tok != nil {
				name = "token:" + tok.Name
			}
			_, _ = w.Write([]byte(`{"caller":` + strconv.Quote(name) + `}`))
		case "/console/logout":
			if r.Method != http.MethodPost {
				http.Error(w, "POST to log out", http.StatusMethodNotAllowed)
				return
			}
			if ck, err := r.Cookie(Cookie); err == nil {
				c.mu.Lock()
				delete(c.sessions, ck.Value)
				c.mu.Unlock()
			}
			setCookie(w, "", -1)
			http.Redirect(w, r, "/console/", http.StatusSeeOther)
		default:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				http.Error(w, "the console's files are read with GET", http.StatusMethodNotAllowed)
				return
			}
			r2 := r.Clone(r.Context())
			r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/console")
			static.ServeHTTP(w, r2)
		}
	})
}

// serveLogin takes a one-time code (GET ?code=, the local operator's)
// or a token (POST, the form's), makes a session and goes to the page;
// anything else goes back to the page's login form, saying why.
func (c *Console) serveLogin(w http.ResponseWriter, r *http.Request) {
	bearer, ok := "", false
	switch r.Method {
	case http.MethodGet:
		if code := r.URL.Query().Get("code"); code != "" && c.useCode(code) {
			ok = true // the local operator
		}
	case http.MethodPost:
		// A page of another origin may not log a browser in (into
		// its own token's session, say).
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
			http.Error(w, "a login comes from the console's own page", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err == nil {
			if v := r.PostForm.Get("token"); v != "" && c.tokens().Match(v) != nil {
				bearer, ok = v, true
			}
		}
	default:
		http.Error(w, "GET with a code, or POST a token", http.StatusMethodNotAllowed)
		return
	}
	if !ok {
		http.Redirect(w, r, "/console/?login=failed", http.StatusSeeOther)
		return
	}
	setCookie(w, c.login(bearer), int(sessionLife/time.Second))
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}
