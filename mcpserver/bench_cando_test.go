//go:build !lite

package mcpserver_test

import (
	"net/http"
	"testing"
)

// BenchmarkHTTPCanDo is can_do over HTTP end to end on the benchmark device:
// an intent naming one zone's setpoint, which every setpoint matches in
// part, answered with the default cap (8 candidates) and with every match
// (max_candidates 100: 25 candidates), so the answer's share shows.
func BenchmarkHTTPCanDo(b *testing.B) {
	c := benchHTTPSession(b)
	for _, limit := range []struct {
		name string
		max  any
	}{{"default", nil}, {"all", 100}} {
		args := map[string]any{"intent": map[string]any{"semantic_tags": []any{"zone_04", "setpoint"}, "action": "set",
			"target": "setpoint_04", "value": 21.5, "location": "lab"}}
		if limit.max != nil {
			args["max_candidates"] = limit.max
		}
		b.Run(limit.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				callTool(b, c, "can_do", args)
			}
		})
	}
}

// BenchmarkHTTPCanDoServer is the server's side of can_do over HTTP (the
// intent of BenchmarkHTTPCanDo, default cap), without a client or a
// connection, for -cpuprofile.
func BenchmarkHTTPCanDoServer(b *testing.B) {
	h, request := benchServerSession(b, false)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"can_do","arguments":{"intent":` +
		`{"semantic_tags":["zone_04","setpoint"],"action":"set","target":"setpoint_04","value":21.5,"location":"lab"}}}}`
	w := &countingWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.n = 0
		h.ServeHTTP(w, request(call))
		if w.status != http.StatusOK {
			b.Fatalf("can_do answered %d", w.status)
		}
	}
	b.ReportMetric(float64(w.n), "answer-B")
}
