package edge

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestCheckHostOr: a loopback listener answers to its own address only,
// and, with a domain, to the hosts just below it (a sandbox's ports); an
// Origin is its own address, or the very host a port's page came from.
func TestCheckHostOr(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	addr := netip.MustParseAddrPort("127.0.0.1:7401")
	h := CheckHostOr(addr, "sandbox.test", ok)
	plain := CheckHost(addr, ok)
	for _, tc := range []struct {
		name, host, origin string
		want, plainWant    int
	}{
		{"its address", "127.0.0.1:7401", "", 204, 204},
		{"localhost", "localhost:7401", "", 204, 204},
		{"a sandbox's port", "8000-s_abc.sandbox.test", "", 204, 421},
		{"with a port", "8000-s_abc.sandbox.test:7401", "", 204, 421},
		{"upper case", "8000-S_ABC.Sandbox.Test", "", 204, 421},
		{"the domain itself", "sandbox.test", "", 421, 421},
		{"two labels below", "a.8000-s_abc.sandbox.test", "", 421, 421},
		{"another domain", "8000-s_abc.evil.test", "", 421, 421},
		{"a suffix that is not a label", "8000-s_abcsandbox.test", "", 421, 421},
		{"a rebinding name", "evil.example:7401", "", 421, 421},
		{"a port's page calling itself", "8000-s_abc.sandbox.test", "http://8000-s_abc.sandbox.test", 204, 421},
		{"a port's page calling the API", "127.0.0.1:7401", "http://8000-s_abc.sandbox.test", 403, 403},
		{"a port's page calling another port", "3000-s_def.sandbox.test", "http://8000-s_abc.sandbox.test", 403, 421},
		{"the API's page", "127.0.0.1:7401", "http://127.0.0.1:7401", 204, 204},
		{"another site calling a port", "8000-s_abc.sandbox.test", "https://evil.example", 403, 421},
	} {
		for _, c := range []struct {
			h    http.Handler
			want int
			kind string
		}{{h, tc.want, "with the domain"}, {plain, tc.plainWant, "without"}} {
			r := httptest.NewRequest("GET", "/", nil)
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			w := httptest.NewRecorder()
			c.h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Errorf("%s, %s: %d, want %d", tc.name, c.kind, w.Code, c.want)
			}
		}
	}
}
