package promcp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestCapKeepsTheBestInRankOrder(t *testing.T) {
	cands := []Ranked{{0.5, Allowed, false}, {0.9, Allowed, false}, {0.7, Allowed, false}, {0.9, Allowed, false}}
	kc, kb, om := Cap(2, cands, nil)
	if !slices.Equal(kc, []int{1, 3}) || len(kb) != 0 {
		t.Fatalf("kept %v %v, want the two 0.9s in the order given", kc, kb)
	}
	if om == nil || om.MaxCandidates != 2 || om.Candidates.Count != 2 || om.Candidates.BestConfidence != 0.7 ||
		om.Candidates.Permissions[Allowed] != 2 || om.Blocked.Count != 0 || om.Blocked.Permissions == nil {
		t.Fatalf("omitted %+v", om)
	}
	if kc, _, om := Cap(4, cands, nil); !slices.Equal(kc, []int{1, 3, 2, 0}) || om != nil {
		t.Fatalf("nothing to leave out: kept %v, omitted %+v", kc, om)
	}
	if kc, _, _ := Cap(0, cands, nil); !slices.Equal(kc, []int{1}) {
		t.Fatalf("a cap below 1 keeps one: %v", kc)
	}
}

// feasible must read the same of the answer as of every match.
func TestCapAlwaysKeepsTheBestAllowedCandidate(t *testing.T) {
	cands := []Ranked{{0.9, RequiresHumanApproval, false}, {0.8, RequiresHumanApproval, false}, {0.3, Allowed, false}, {0.6, Allowed, false}}
	kc, _, om := Cap(2, cands, nil)
	if !slices.Equal(kc, []int{0, 3}) {
		t.Fatalf("kept %v, want the best one and the best allowed one", kc)
	}
	if om.Candidates.Permissions[RequiresHumanApproval] != 1 || om.Candidates.Permissions[Allowed] != 1 || om.Candidates.BestConfidence != 0.8 {
		t.Fatalf("omitted %+v", om.Candidates)
	}
}

// Every kind of refusal is shown while there is room, before a second of
// any kind, whatever the confidence.
func TestCapShowsEachRefusalFirst(t *testing.T) {
	blocked := []Ranked{{0.9, RateLimited, false}, {0.9, RateLimited, false}, {0.8, RateLimited, false}, {0.2, PolicyDenied, false}, {0.1, SourceUnreachable, false}}
	_, kb, om := Cap(3, nil, blocked)
	if !slices.Equal(kb, []int{0, 3, 4}) {
		t.Fatalf("kept %v, want one of each permission", kb)
	}
	if om.Blocked.Count != 2 || om.Blocked.Permissions[RateLimited] != 2 || om.Blocked.BestConfidence != 0.9 || om.Candidates.Count != 0 {
		t.Fatalf("omitted %+v", om)
	}
	if !strings.Contains(om.Hint, "Left out: 2 blocked entries (2 rate_limited; best confidence 0.9)") || !strings.Contains(om.Hint, "max_candidates (now 3)") {
		t.Fatalf("hint %q", om.Hint)
	}
	if _, kb, _ := Cap(4, nil, blocked); !slices.Equal(kb, []int{0, 1, 3, 4}) {
		t.Fatalf("room left after one of each goes by rank: %v", kb)
	}
}

// A merged mesh report is capped again, the peers' omissions added, and an
// offline device is listed whatever the cap.
func TestCapReport(t *testing.T) {
	peer, _, _ := Cap(1, []Ranked{{0.9, Allowed, false}, {0.4, Allowed, false}}, nil)
	if len(peer) != 1 {
		t.Fatal(peer)
	}
	rep := CapabilityReport{
		Candidates: []Candidate{{Capability: "do_a", Confidence: 0.5, Permission: Allowed}, {Capability: "do_b", Confidence: 0.8, Permission: Allowed}},
		Blocked: []Blocked{
			{Capability: "do_c", Confidence: 0.9, Permission: CooldownActive},
			{Capability: "do_d", Confidence: 0.7, Permission: CooldownActive},
			{Capability: "*", Source: "pump_02", Permission: SourceUnreachable, Reason: "device_offline: dead"},
			{Capability: "*", Source: "pump_03", Permission: SourceUnreachable, Reason: "device_offline: dead"},
		},
		Metadata: ReportMetadata{Omitted: &Omitted{MaxCandidates: 1, Candidates: OmittedEntries{Count: 3, BestConfidence: 0.4, Permissions: map[Permission]int{Allowed: 3}},
			Blocked: OmittedEntries{Permissions: map[Permission]int{}}}},
	}
	rep.Context = ReportContext{RelatedReads: []string{"read_a", "pump_02.read_b"}, CurrentObservations: map[string]any{"read_a": 1.0, "pump_02.read_b": 2.0}}
	CapReport(&rep, 1)
	if !slices.Equal(rep.Context.RelatedReads, []string{"read_a"}) || len(rep.Context.CurrentObservations) != 1 {
		t.Fatalf("related reads %v, observations %v", rep.Context.RelatedReads, rep.Context.CurrentObservations)
	}
	var names []string
	for _, c := range rep.Candidates {
		names = append(names, c.Capability)
	}
	for _, b := range rep.Blocked {
		names = append(names, b.Capability+"@"+b.Source)
	}
	if !slices.Equal(names, []string{"do_b", "do_c@", "*@pump_02", "*@pump_03"}) {
		t.Fatalf("kept %v", names)
	}
	om := rep.Metadata.Omitted
	if om.Candidates.Count != 4 || om.Candidates.Permissions[Allowed] != 4 || om.Candidates.BestConfidence != 0.5 ||
		om.Blocked.Count != 1 || om.Blocked.Permissions[CooldownActive] != 1 || om.RelatedReads.Count != 1 ||
		!strings.Contains(om.Hint, "Left out: 4 candidates (4 allowed; best confidence 0.5), 1 blocked entry (1 cooldown_active; best confidence 0.7) and 1 related read.") {
		t.Fatalf("omitted %+v", om)
	}
	out, err := json.Marshal(rep.Metadata)
	if err != nil || !strings.Contains(string(out), `"omitted":{"max_candidates":1,"candidates":{"count":4`) {
		t.Fatalf("metadata %s %v", out, err)
	}
}

// Related reads are capped as the other lists are, in the order given, each
// read's observation going with it, and counted beside the matches left out.
func TestCapReads(t *testing.T) {
	rep := CapabilityReport{Context: ReportContext{
		RelatedReads:        []string{"read_a", "read_b", "read_c", "read_d"},
		CurrentObservations: map[string]any{"read_a": 1.0, "read_c": 3.0, "read_d": 4.0},
	}}
	CapReads(&rep, 4)
	if len(rep.Context.RelatedReads) != 4 || rep.Metadata.Omitted != nil {
		t.Fatalf("nothing to leave out: %v, omitted %+v", rep.Context.RelatedReads, rep.Metadata.Omitted)
	}
	CapReads(&rep, 2)
	if !slices.Equal(rep.Context.RelatedReads, []string{"read_a", "read_b"}) || len(rep.Context.CurrentObservations) != 1 || rep.Context.CurrentObservations["read_a"] != 1.0 {
		t.Fatalf("kept %v, observations %v", rep.Context.RelatedReads, rep.Context.CurrentObservations)
	}
	om := rep.Metadata.Omitted
	if om == nil || om.MaxCandidates != 2 || om.RelatedReads.Count != 2 || om.Candidates.Count != 0 || om.Blocked.Count != 0 ||
		om.Hint != "Left out: 2 related reads. To see them, narrow the intent (target, semantic_tags, location, scope) or raise max_candidates (now 2)." {
		t.Fatalf("omitted %+v", om)
	}
	CapReads(&rep, 0)
	if !slices.Equal(rep.Context.RelatedReads, []string{"read_a"}) || rep.Metadata.Omitted.RelatedReads.Count != 3 {
		t.Fatalf("a cap below 1 keeps one, the counts add up: %v, omitted %+v", rep.Context.RelatedReads, rep.Metadata.Omitted)
	}
	if om := MergeOmitted(&Omitted{}, nil); om.Hint != "" {
		t.Fatalf("a peer's omitted that counts nothing: %+v", om)
	}
	out, err := json.Marshal(rep.Metadata.Omitted)
	if err != nil || !strings.Contains(string(out), `"related_reads":{"count":3}`) {
		t.Fatalf("omitted %s %v", out, err)
	}
}
