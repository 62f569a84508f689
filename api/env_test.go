package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzEnv checks that whatever a caller sends as "env", an object is
// either refused or taken as its own entries: each name as sent (none
// holding "="), sorted, each value as sent.
func FuzzEnv(f *testing.F) {
	f.Add(`{"A":"1","B":"x=y"}`)
	f.Add(`["A=1"]`)
	f.Add(`{"A=B":"c"}`)
	f.Add(`{"":"v"}`)
	f.Add(`"A=1"`)
	f.Fuzz(func(t *testing.T, in string) {
		var e Env
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "[]string") {
				t.Fatalf("error %q names Go's types", err)
			}
			return
		}
		var obj map[string]string
		if json.Unmarshal([]byte(in), &obj) != nil || obj == nil {
			return
		}
		var names []string
		for _, kv := range e {
			k, v, _ := strings.Cut(kv, "=")
			if obj[k] != v {
				t.Fatalf("%q: entry %q, want value %q", in, kv, obj[k])
			}
			names = append(names, k)
		}
		if len(names) != len(obj) || !slices.IsSorted(names) {
			t.Fatalf("%q: entries %q", in, e)
		}
	})
}
