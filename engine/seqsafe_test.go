package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A sequence's step that has passed the sequence's look at the safe state
// but has not yet written when the safe state drives its point writes
// nothing: the step checks again under the register's write turn, which
// the safe state's write takes too. Here step 2 (the pump on) waits for a
// person's approval, and the dead man's safe state comes while it waits.
// Before, the approved step switched the pump on after the safe state had
// switched it off, and the sequence answered completed.
func TestSafeStateStopsAStepAlreadyUnderWay(t *testing.T) {
	path := opsWith(t, `
  - name: heat_then_pump
    kind: sequence
    description: Raise the oven setpoint, then start the pump.
    semantic_tags: [oven, pump]
    steps:
      - {tool: do_oven_setpoint, value: 30}
      - {tool: do_pump, value: true}
`)
	m, diags := manifest.Load(path)
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %s", diags)
	}
	e, wire := simEngineWith(t, m, `physmcp_policy_version: "0.1"
capabilities:
  do_pump:
    rules: [{type: human_approval}]
`)
	ctx := context.Background()
	caller := operator
	caller.Approve = func(ctx context.Context, req engine.ApprovalRequest) (engine.Approval, error) {
		// the person takes a while: the dead man fires meanwhile
		if err := e.ApplySafeState(ctx, "dead-man timeout (test)"); err != nil {
			t.Errorf("safe state: %v", err)
		}
		return engine.Approval{Approved: true}, nil
	}
	resp, err := e.Sequence(ctx, caller, "do_heat_then_pump", promcp.SequenceRequest{IdempotencyKey: "seq-approve"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != promcp.SequenceCompensationFailed || len(resp.Compensations) != 0 || !strings.Contains(resp.Reason, "safe state") {
		t.Errorf("sequence: outcome %s, reason %q, compensations %+v; want compensation_failed naming the safe state, nothing undone", resp.Outcome, resp.Reason, resp.Compensations)
	}
	coils, err := wire.ReadBits(ctx, 1, manifest.TableCoil, 1, 1)
	if err != nil || coils[0] {
		t.Fatalf("pump = %v, %v; want off, as the safe state left it (writes %v)", coils, err, wire.log())
	}
}
