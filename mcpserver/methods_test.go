package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// WithMethods answers its methods and hands every other request, intact, to next.
func TestWithMethods(t *testing.T) {
	var passed []string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		passed = append(passed, r.Method+" "+string(body))
		w.WriteHeader(http.StatusTeapot)
	})
	h := WithMethods(next, map[string]Method{
		"physmcp/echo": func(_ context.Context, params json.RawMessage) (any, error) {
			return map[string]any{"params": params}, nil
		},
		"physmcp/fail": func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("no mesh") },
	})
	for _, c := range []struct {
		method, body string
		status       int
		answer       string // part of the body; "" when passed on
	}{
		{"POST", `{"jsonrpc":"2.0","id":7,"method":"physmcp/echo","params":{"a":1}}`, 200, `{"id":7,"jsonrpc":"2.0","result":{"params":{"a":1}}}`},
		{"POST", `{"jsonrpc":"2.0","id":8,"method":"physmcp\/ech\u006f"}`, 200, `{"id":8,"jsonrpc":"2.0","result":{"params":null}}`},
		{"POST", `{"jsonrpc":"2.0","id":"x","method":"physmcp/fail"}`, 200, `"error":{"code":-32603,"message":"no mesh"}`},
		{"POST", `{"jsonrpc":"1.0","id":1,"method":"physmcp/echo"}`, 200, `"code":-32600`},
		{"POST", `{"jsonrpc":"2.0","method":"physmcp/echo"}`, 202, ""},
		{"POST", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, 418, ""},
		{"POST", `[{"jsonrpc":"2.0","id":1,"method":"physmcp/echo"}]`, 418, ""},
		{"POST", `not json`, 418, ""},
		{"GET", ``, 418, ""},
	} {
		passed = nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, "/mcp", strings.NewReader(c.body)))
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.answer) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.body, rec.Code, rec.Body.String(), c.status, c.answer)
		}
		if wantPassed := c.status == 418; wantPassed != (len(passed) == 1) || wantPassed && passed[0] != c.method+" "+c.body {
			t.Errorf("%s %s: passed on %q", c.method, c.body, passed)
		}
	}
}
