package engine_test

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/promcp"
)

func candidateFor(rep promcp.CapabilityReport, tool string) (promcp.Candidate, bool) {
	for _, c := range rep.Candidates {
		if c.Capability == tool {
			return c, true
		}
	}
	return promcp.Candidate{}, false
}

// An orchestrator acting on confidence >= 0.7 must not act on the wrong
// thing: another location rules the device out, and a target naming another
// capability drops the candidate below 0.7.
func TestConfidenceFallsWhenLocationOrTargetDisagree(t *testing.T) {
	r := newRig(t) // the device is in zone lab, area bench_3
	boiler := promcp.Intent{SemanticTags: []string{"boiler", "setpoint"}, Action: "set", Value: 50.0}

	here := boiler
	here.Location = "lab"
	c, ok := candidateFor(r.canDo(t, operator, here), "do_boiler_setpoint")
	if !ok || c.Confidence < 0.7 {
		t.Fatalf("intent for this device's location: %+v", c)
	}

	elsewhere := boiler
	elsewhere.Location = "warehouse_9"
	rep := r.canDo(t, operator, elsewhere)
	if rep.Feasible || len(rep.Candidates) != 0 || len(rep.Unroutable) != 1 || rep.Unroutable[0].Reason != promcp.NoProducer ||
		!strings.Contains(rep.Unroutable[0].Detail, "warehouse_9") {
		t.Fatalf("intent for another location: %+v", rep)
	}

	wrongTarget := boiler
	wrongTarget.Target = "damper_position"
	if c, ok := candidateFor(r.canDo(t, operator, wrongTarget), "do_boiler_setpoint"); ok && c.Confidence >= 0.7 {
		t.Fatalf("a target naming another capability left confidence %v", c.Confidence)
	}
	rightTarget := boiler
	rightTarget.Target = "boiler_setpoint"
	if c, ok := candidateFor(r.canDo(t, operator, rightTarget), "do_boiler_setpoint"); !ok || c.Confidence < 0.9 {
		t.Fatalf("the named target: %+v", c)
	}
}

// A device that declares no location cannot confirm one: confirm first.
func TestConfidenceWithUnknownDeviceLocation(t *testing.T) {
	r := newRigFiles(t, "testdata/tank.manifest.yml", "")
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"valve", "inlet"}, Action: "set", Value: 10.0, Location: "greenhouse_a"})
	c, ok := candidateFor(rep, "do_inlet_valve")
	if !ok || c.Confidence >= 0.7 {
		t.Fatalf("candidate %+v, want one below 0.7", c)
	}
}
