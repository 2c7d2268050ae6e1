//go:build !lite

package mcpserver_test

import (
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
