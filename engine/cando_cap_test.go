package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/promcp"
)

// zoneRig is a device of twelve zone setpoints and their temperatures:
// do_setpoint_00 is interlocked on its zone's temperature, 01 to 03 need a
// person's approval, 04 needs a supervisor.
func zoneRig(t *testing.T) *rig {
	t.Helper()
	var m strings.Builder
	m.WriteString("physmcp_version: \"0.1\"\ndevice: {id: zones, type: test_rig, location: {zone: lab}}\n" +
		"buses:\n  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}\ncapabilities:\n")
	for i := range 12 {
		interlock := ""
		if i == 0 {
			interlock = `, interlocks: [{capability: temperature_00, op: "<", value: 90, reason: "zone 0 overheated"}]`
		}
		fmt.Fprintf(&m, `  - {name: setpoint_%02d, kind: do, description: Zone %d setpoint., data_type: float, unit: "°C", range: {min: 0, max: 100},
     binding: {bus: mb, unit: 1, table: holding, address: %d, data_type: uint16, scale: 0.1},
     semantic_tags: [heating, setpoint, zone_%02d], side_effects: ["zone %d heats"]%s}
  - {name: temperature_%02d, kind: read, description: Zone %d air temperature., data_type: float, unit: "°C", range: {min: -40, max: 125},
     binding: {bus: mb, unit: 1, table: input, address: %d, data_type: int16, scale: 0.1},
     semantic_tags: [temperature, air, zone_%02d]}
`, i, i, i, i, i, interlock, i, i, i, i)
	}
	policy := "physmcp_policy_version: \"0.1\"\nidentity:\n  local_role: operator\ncapabilities:\n" +
		"  do_setpoint_01: {rules: [{type: human_approval}]}\n" +
		"  do_setpoint_02: {rules: [{type: human_approval}]}\n" +
		"  do_setpoint_03: {rules: [{type: human_approval}]}\n" +
		"  do_setpoint_04: {rules: [{type: permission, require: [supervisor]}]}\n"
	dir := t.TempDir()
	mp, pp := filepath.Join(dir, "zones.yml"), filepath.Join(dir, "policy.yml")
	if err := os.WriteFile(mp, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pp, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRigFiles(t, mp, pp)
	if err := r.bus(t, "mb").SetValue("temperature_00", 95.0); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) canDoAtMost(t *testing.T, in promcp.Intent, limit int) promcp.CapabilityReport {
	t.Helper()
	rep, err := r.e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: in, MaxCandidates: limit})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func tools[T any](entries []T, name func(T) string) []string {
	var out []string
	for _, e := range entries {
		out = append(out, name(e))
	}
	return out
}

func candidateTools(rep promcp.CapabilityReport) []string {
	return tools(rep.Candidates, func(c promcp.Candidate) string { return c.Capability })
}

func blockedTools(rep promcp.CapabilityReport) []string {
	return tools(rep.Blocked, func(b promcp.Blocked) string { return b.Capability })
}

// The cap keeps the best matches, and a blocked match that outranks them
// (the named setpoint, interlocked) is listed with its reason; what is left
// out is counted.
func TestCanDoCapKeepsBestAndBlockedTarget(t *testing.T) {
	r := zoneRig(t)
	rep := r.canDoAtMost(t, promcp.Intent{SemanticTags: []string{"zone_00", "setpoint"}, Action: "set", Target: "setpoint_00", Value: 21.5, Location: "lab"}, 0)
	if len(rep.Candidates) != promcp.DefaultMaxCandidates {
		t.Fatalf("%d candidates %v, want the default cap %d", len(rep.Candidates), candidateTools(rep), promcp.DefaultMaxCandidates)
	}
	if !slices.Equal(blockedTools(rep), []string{"do_setpoint_00", "do_setpoint_04"}) {
		t.Fatalf("blocked %v", blockedTools(rep))
	}
	if b := rep.Blocked[0]; b.Permission != promcp.PolicyDenied || !strings.Contains(b.Reason, "zone 0 overheated") || b.Confidence != 1 || len(b.MatchReasons) == 0 {
		t.Fatalf("the interlocked target: %+v", b)
	}
	om := rep.Metadata.Omitted
	if om == nil || om.MaxCandidates != promcp.DefaultMaxCandidates || om.Candidates.Count != 2 || om.Blocked.Count != 0 ||
		om.Candidates.Permissions[promcp.Allowed] != 2 || om.Candidates.BestConfidence != rep.Candidates[len(rep.Candidates)-1].Confidence {
		t.Fatalf("omitted %+v", om)
	}
	if !strings.Contains(om.Hint, "Left out: 2 candidates (2 allowed") || !strings.Contains(om.Hint, "max_candidates") {
		t.Fatalf("hint %q", om.Hint)
	}
	if want := []string{"tag_overlap 2/2", "action_fits set", "target_match setpoint_00", "location_match lab"}; !slices.Equal(rep.Blocked[0].MatchReasons, want) {
		t.Fatalf("match_reasons of the target %q, want %q", rep.Blocked[0].MatchReasons, want)
	}
	// The others share the tag setpoint and the target's word setpoint, not its number.
	for _, c := range rep.Candidates {
		if want := []string{"tag_overlap 1/2", "action_fits set", "target_partial setpoint_00 1/2", "location_match lab"}; !slices.Equal(c.MatchReasons, want) || c.ValidUntil == "" {
			t.Fatalf("candidate %+v, want match_reasons %q", c, want)
		}
	}
	if !rep.Feasible {
		t.Fatalf("not feasible: %+v", rep)
	}
}

// Equal matches keep the engine's order, but the best allowed candidate is
// always listed, so feasible is true exactly when a listed candidate is
// allowed; blocked entries show each kind of refusal first.
func TestCanDoCapKeepsAllowedAndEveryRefusal(t *testing.T) {
	r := zoneRig(t)
	in := promcp.Intent{SemanticTags: []string{"setpoint"}, Action: "set", Value: 21.5}
	rep := r.canDoAtMost(t, in, 2)
	if !slices.Equal(candidateTools(rep), []string{"do_setpoint_01", "do_setpoint_05"}) || !rep.Feasible {
		t.Fatalf("candidates %v feasible %v", candidateTools(rep), rep.Feasible)
	}
	if !slices.Equal(blockedTools(rep), []string{"do_setpoint_00", "do_setpoint_04"}) {
		t.Fatalf("blocked %v", blockedTools(rep))
	}
	om := rep.Metadata.Omitted
	if om == nil || om.Candidates.Count != 8 || om.Candidates.Permissions[promcp.RequiresHumanApproval] != 2 || om.Candidates.Permissions[promcp.Allowed] != 6 || om.Blocked.Count != 0 {
		t.Fatalf("omitted %+v", om)
	}

	rep = r.canDoAtMost(t, in, 1)
	if !slices.Equal(candidateTools(rep), []string{"do_setpoint_05"}) || !rep.Feasible {
		t.Fatalf("candidates %v feasible %v", candidateTools(rep), rep.Feasible)
	}
	if !slices.Equal(blockedTools(rep), []string{"do_setpoint_00"}) {
		t.Fatalf("blocked %v", blockedTools(rep))
	}
	if om := rep.Metadata.Omitted; om.Blocked.Count != 1 || om.Blocked.Permissions[promcp.PermissionInsufficient] != 1 || !strings.Contains(om.Hint, "1 blocked entry (1 permission_insufficient") {
		t.Fatalf("omitted %+v", om)
	}

	rep = r.canDoAtMost(t, in, 100)
	if len(rep.Candidates) != 10 || len(rep.Blocked) != 2 || rep.Metadata.Omitted != nil {
		t.Fatalf("max_candidates 100: %d candidates, %d blocked, omitted %+v", len(rep.Candidates), len(rep.Blocked), rep.Metadata.Omitted)
	}
}

// The index finds a capability by its target's words alone, and related
// reads by tag.
func TestCanDoIndexFindsTargetsAndRelatedReads(t *testing.T) {
	r := zoneRig(t)
	rep := r.canDoAtMost(t, promcp.Intent{SemanticTags: []string{"espresso"}, Action: "set", Target: "setpoint_07"}, 0)
	if len(rep.Candidates) == 0 || rep.Candidates[0].Capability != "do_setpoint_07" || rep.Candidates[0].Confidence < rep.Candidates[len(rep.Candidates)-1].Confidence {
		t.Fatalf("candidates %v", candidateTools(rep))
	}
	r.read(t, "read_temperature_03")
	rep = r.canDoAtMost(t, promcp.Intent{SemanticTags: []string{"ZONE_03 "}, Action: "read"}, 0)
	if !slices.Equal(candidateTools(rep), []string{"read_temperature_03"}) || !slices.Equal(rep.Context.RelatedReads, []string{"read_temperature_03"}) ||
		rep.Context.CurrentObservations["read_temperature_03"] == nil || rep.Metadata.Omitted != nil {
		t.Fatalf("report %+v", rep)
	}
}

// Related reads come most relevant first (the most intent tags shared, ties
// in manifest order) and all of them: the edge that knows what it serves
// caps them.
func TestCanDoRelatedReadsRanked(t *testing.T) {
	r := zoneRig(t)
	rep := r.canDoAtMost(t, promcp.Intent{SemanticTags: []string{"temperature", "zone_07", "Temperature"}, Action: "read"}, 2)
	want := []string{"read_temperature_07"}
	for i := range 12 {
		if i != 7 {
			want = append(want, fmt.Sprintf("read_temperature_%02d", i))
		}
	}
	if !slices.Equal(rep.Context.RelatedReads, want) {
		t.Fatalf("related reads %v, want %v", rep.Context.RelatedReads, want)
	}
}

// TestCanDoAnswersAlikeAfterAnyCall: can_do reuses its lists of matches from
// call to call (a pool), so an answer must not depend on the call before it.
// Each intent's answer (all permissions, blocked reasons, omitted counts)
// after every other intent is the one it gets after itself.
func TestCanDoAnswersAlikeAfterAnyCall(t *testing.T) {
	r := zoneRig(t)
	type call struct {
		in    promcp.Intent
		limit int
	}
	calls := []call{
		{promcp.Intent{SemanticTags: []string{"heating"}, Action: "set", Value: 21.5}, 0},
		{promcp.Intent{SemanticTags: []string{"heating"}, Action: "set", Value: 21.5}, 2},
		{promcp.Intent{SemanticTags: []string{"heating"}, Action: "set", Value: 150.0}, 3},
		{promcp.Intent{SemanticTags: []string{"zone_04", "setpoint"}, Action: "set", Target: "setpoint_04", Value: 21.5, Location: "lab"}, 1},
		{promcp.Intent{SemanticTags: []string{"temperature", "heating"}}, 100},
		{promcp.Intent{SemanticTags: []string{"nothing_here"}, Action: "set"}, 0},
	}
	answer := func(c call) string {
		rep := r.canDoAtMost(t, c.in, c.limit)
		rep.QueryID, rep.Metadata.Timestamp, rep.Metadata.TotalLatencyMs = "", "", 0
		for i := range rep.Candidates {
			rep.Candidates[i].ValidUntil, rep.Candidates[i].EstimatedLatencyMs = "", 0
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range calls {
		answer(c) // every point read once: later answers see the same cache
	}
	for _, c := range calls {
		answer(c)
		want := answer(c)
		if !strings.Contains(want, `"omitted":{`) && c.limit > 0 && c.limit < 4 {
			t.Fatalf("%+v omits nothing: the test needs a cap that applies\n%s", c, want)
		}
		for _, before := range calls {
			answer(before)
			if got := answer(c); got != want {
				t.Errorf("%+v after %+v:\n got %s\nwant %s", c, before, got, want)
			}
		}
	}
}
