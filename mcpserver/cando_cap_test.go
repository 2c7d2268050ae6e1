//go:build !lite

package mcpserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
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

// twoGroupReads is a device of 3 outdoor temperatures (listed first) and 10
// indoor ones, each group on its own endpoint.
func twoGroupReads(t *testing.T) *engine.Engine {
	t.Helper()
	var m strings.Builder
	m.WriteString("physmcp_version: \"0.1\"\ndevice: {id: temps, type: test_rig, location: {zone: lab}}\n" +
		"buses:\n  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}\ncapabilities:\n")
	for i, where := range slices.Concat(slices.Repeat([]string{"outdoor"}, 3), slices.Repeat([]string{"indoor"}, 10)) {
		fmt.Fprintf(&m, `  - {name: %[1]s_%02[2]d, kind: read, group: %[1]s, description: Air temperature %[2]d., data_type: float, unit: "°C",
     binding: {bus: mb, unit: 1, table: input, address: %[2]d, data_type: int16, scale: 0.1}, semantic_tags: [temperature, %[1]s_%02[2]d]}
`, where, i)
	}
	dir := t.TempDir()
	mp, pp := filepath.Join(dir, "m.yml"), filepath.Join(dir, "p.yml")
	if err := os.WriteFile(mp, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pp, []byte("physmcp_policy_version: \"0.1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mf, p := loadDevice(t, mp, pp)
	return simEngine(t, mf, p, nil)
}

// related_reads is capped at max_candidates as candidates are, counted in
// metadata.omitted after the reads another endpoint serves are dropped
// (the outdoor reads, first in the manifest, take no place on the indoor
// endpoint), the most relevant kept, each with its observation.
func TestCanDoCapsRelatedReads(t *testing.T) {
	e := twoGroupReads(t)
	endpoint := func(group string) *session {
		s, err := mcpserver.New(e, groupOptions(e, group))
		if err != nil {
			t.Fatal(err)
		}
		_, sess := listTools(t, inProcessClient(t, s))
		return sess
	}
	indoor, outdoor := endpoint("indoor"), endpoint("outdoor")
	indoor.call("read_indoor_11", nil, false)
	indoor.call("read_indoor_03", nil, false)

	rep := indoor.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"temperature", "indoor_11"}}, "max_candidates": 2}, false)
	ctx := rep["context"].(map[string]any)
	if reads := ctx["related_reads"].([]any); !slices.Equal(reads, []any{"read_indoor_11", "read_indoor_03"}) {
		t.Fatalf("related reads %v, want the named read and the first indoor one", reads)
	}
	if obs := ctx["current_observations"].(map[string]any); len(obs) != 2 || obs["read_indoor_11"] == nil || obs["read_indoor_03"] == nil {
		t.Fatalf("observations %v, want those of the listed reads", obs)
	}
	om := rep["metadata"].(map[string]any)["omitted"].(map[string]any)
	if om["related_reads"].(map[string]any)["count"] != 8.0 || om["candidates"].(map[string]any)["count"] != 8.0 ||
		!strings.Contains(om["hint"].(string), "8 candidates (8 allowed; best confidence 0.5) and 8 related reads.") {
		t.Fatalf("omitted %v, want 8 candidates and 8 reads (10 indoor, 2 kept)", om)
	}

	rep = indoor.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"temperature"}}, "max_candidates": 10}, false)
	if reads := rep["context"].(map[string]any)["related_reads"].([]any); len(reads) != 10 || rep["metadata"].(map[string]any)["omitted"] != nil {
		t.Fatalf("max_candidates 10: related reads %v, omitted %v", reads, rep["metadata"])
	}
	rep = outdoor.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"temperature"}}}, false)
	if reads := rep["context"].(map[string]any)["related_reads"].([]any); len(reads) != 3 || rep["metadata"].(map[string]any)["omitted"] != nil {
		t.Fatalf("outdoor: related reads %v, omitted %v", reads, rep["metadata"])
	}
}
