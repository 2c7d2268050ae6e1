//go:build !lite

package mcpserver_test

import (
	"testing"
)

// A can_do that matches more than max_candidates lists the best ones and
// says in metadata.omitted what it left out, in a body that still validates
// against can_do's outputSchema and whose text block is the same JSON.
func TestCanDoMaxCandidates(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	_, sess := listTools(t, inProcessClient(t, s))
	intent := map[string]any{"semantic_tags": []any{"climate", "temperature"}}

	all := sess.call("can_do", map[string]any{"intent": intent}, false)
	matched := len(all["candidates"].([]any))
	if matched < 3 || all["metadata"].(map[string]any)["omitted"] != nil {
		t.Fatalf("the example should match at least 3 under the default cap, all listed: %v", all)
	}

	rep := sess.call("can_do", map[string]any{"intent": intent, "max_candidates": 1}, false)
	cands := rep["candidates"].([]any)
	if len(cands) != 1 || cands[0].(map[string]any)["capability"] != all["candidates"].([]any)[0].(map[string]any)["capability"] {
		t.Fatalf("max_candidates 1: %v, want the best of %v", cands, all["candidates"])
	}
	om, _ := rep["metadata"].(map[string]any)["omitted"].(map[string]any)
	if om == nil || om["max_candidates"] != 1.0 || om["candidates"].(map[string]any)["count"] != float64(matched-1) || om["hint"] == "" {
		t.Fatalf("omitted %v, want %d candidates counted", om, matched-1)
	}

	bad := sess.call("can_do", map[string]any{"intent": intent, "max_candidates": 0}, false)
	if u := bad["unroutable"].([]any); len(u) != 1 || u[0].(map[string]any)["reason"] != "malformed_request" {
		t.Fatalf("max_candidates 0: %v, want malformed_request", bad)
	}
}
