package engine

import (
	"context"
	"fmt"
)

// QuorumCheck runs this node's quorum check name, as its own policy defines
// it (quorum_checks), for a peer that asks this node to confirm a quorum
// write: the time windows, then every condition on a fresh reading of this
// device, as interlocks are checked right before a write. nil means the
// check holds; otherwise the error says why not. A name the policy does not
// define never holds: a node confirms only what it knows how to check.
func (e *Engine) QuorumCheck(ctx context.Context, name string) error {
	err := e.runQuorumCheck(ctx, name)
	if err != nil {
		e.log.Info("quorum vote refused by a quorum check", "check", name, "reason", err)
	}
	return err
}

func (e *Engine) runQuorumCheck(ctx context.Context, name string) error {
	qc := e.p.QuorumCheck(name)
	if qc == nil {
		return fmt.Errorf("unknown quorum_check %q: this node's policy does not define it", name)
	}
	if ok, why, _ := qc.Window.Evaluate(e.p, e.now()); !ok {
		return fmt.Errorf("quorum_check %s: %s", name, why)
	}
	for _, c := range qc.Conditions {
		il := c.Interlock
		src := e.catalog().points[il.Source.ToolName()]
		r, _, why := e.conditionReading(ctx, src, true)
		if r == nil {
			return fmt.Errorf("quorum_check %s: %s cannot be checked: %s", name, condition(il), why)
		}
		if !holds(r.value, il.Op, il.Value) {
			reason := ""
			if il.Reason != "" {
				reason = il.Reason + ": "
			}
			return fmt.Errorf("quorum_check %s: %s%s is %v%s, needs %s", name, reason, src.tool, r.value, unitSuffix(src.c), condition(il))
		}
	}
	return nil
}
