package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestTracing(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Tracing
		err  string // a substring of the error, "" for none
	}{
		{"off by default", "tools: {}", Tracing{}, ""},
		{"no path gets /v1/traces", "tracing: {endpoint: 'http://127.0.0.1:4318'}", Tracing{Endpoint: "http://127.0.0.1:4318/v1/traces"}, ""},
		{"a slash too", "tracing: {endpoint: 'https://otel.example/'}", Tracing{Endpoint: "https://otel.example/v1/traces"}, ""},
		{"a path is kept", "tracing: {endpoint: 'https://otel.example/in/traces', service_name: edge-1, headers: {Authorization: Bearer x}}",
			Tracing{Endpoint: "https://otel.example/in/traces", ServiceName: "edge-1", Headers: map[string]string{"Authorization": "Bearer x"}}, ""},
		{"grpc", "tracing: {endpoint: 'grpc://127.0.0.1:4317'}", Tracing{}, "tracing.endpoint: \"grpc://127.0.0.1:4317\": the scheme must be http or https"},
		{"no scheme", "tracing: {endpoint: '127.0.0.1:4318'}", Tracing{}, "tracing.endpoint"},
		{"no host", "tracing: {endpoint: 'http:///v1/traces'}", Tracing{}, "no host"},
		{"user", "tracing: {endpoint: 'http://u:p@h:4318'}", Tracing{}, "put a credential in tracing.headers"},
		{"query", "tracing: {endpoint: 'http://h:4318/?a=b'}", Tracing{}, "no query"},
		{"header name", "tracing: {endpoint: 'http://h', headers: {'a b': x}}", Tracing{}, `tracing.headers["a b"]: "a b" is not an HTTP header name`},
		{"header value", "tracing: {endpoint: 'http://h', headers: {A: \"x\\r\\nB: y\"}}", Tracing{}, "not a valid HTTP header value"},
		{"framing header", "tracing: {endpoint: 'http://h', headers: {Content-Type: x}}", Tracing{}, "is set by airlock"},
		{"empty service name", "tracing: {endpoint: 'http://h', service_name: ''}", Tracing{}, "tracing.service_name"},
		{"unknown key", "tracing: {endpiont: 'http://h'}", Tracing{}, `unknown field "endpiont"`},
		{"not a mapping", "tracing: http://h", Tracing{}, "expected a mapping of tracing settings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("a.yaml", []byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Tracing, tt.want) {
				t.Errorf("got %+v, want %+v", c.Tracing, tt.want)
			}
		})
	}
}
