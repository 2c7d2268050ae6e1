package engine

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// can_do for operations: start_*, do_cancel_* and a sequence's do_* are
// matched like do_* tools (by the operation's tags and the words of the
// tool's name) and checked without acting: a start as a write of its driven
// point (with the operation's role, and no other operation driving the
// point), a sequence as each step's own dry run against the device as it is
// now (the steps before it have not acted yet, so this is the best a dry run
// can say), a cancel by role and reachability.

// opVocabulary stands for an operation's tool in matching: a do capability
// named after the tool, with the operation's tags.
func opVocabulary(t Tool) *point {
	o := t.Operation
	name := strings.TrimPrefix(strings.TrimPrefix(t.Name, "do_"), "start_")
	c := &manifest.Capability{Name: name, Kind: manifest.KindDo, DataType: manifest.TypeString, SemanticTags: o.SemanticTags}
	if o.Target != nil && t.Kind == ToolStart {
		c.DataType = o.Target.DataType
	}
	pt := &point{c: c, tool: t.Name, nameWords: words(name), vocab: map[string]bool{}}
	for _, tag := range o.SemanticTags {
		pt.vocab[strings.ToLower(tag)] = true
	}
	for _, w := range pt.nameWords {
		pt.vocab[w] = true
	}
	return pt
}

// operationMatches are the operations' tools matching in, checked.
func (e *Engine) operationMatches(ctx context.Context, caller Caller, in query, scope []string) []hit {
	var hits []hit
	cat := e.catalog()
	for _, i := range cat.canDoIndex().ops {
		t := &cat.tools[i]
		vp := opVocabulary(*t)
		if !e.inScope(vp, scope) && !e.inScope(&point{c: &manifest.Capability{Name: t.Operation.Name}, tool: t.Name}, scope) {
			continue
		}
		m, ok := e.match(vp, in)
		if !ok {
			continue
		}
		d, driven := e.opDryRun(ctx, *t, caller, in.Intent)
		hits = append(hits, hit{pt: driven, op: t, vocab: vp, m: m, d: d})
	}
	return hits
}

// opDryRun checks an operation tool for caller without acting; driven is the
// point a start or cancel acts on (nil for a sequence).
func (e *Engine) opDryRun(ctx context.Context, t Tool, caller Caller, in promcp.Intent) (decision, *point) {
	o := t.Operation
	if d := e.opRoleAccess(o, t.Kind, caller.Role); d.permission != promcp.Allowed {
		return d, nil
	}
	if t.Kind == ToolSequence {
		for i, s := range o.Steps {
			target := s.Tool
			if s.Start != nil {
				target = s.Start.Target.ToolName()
			}
			d := e.dryRun(ctx, e.catalog().points[target], caller, promcp.Intent{Action: "set", Value: s.Value})
			if d.permission != promcp.Allowed {
				return deny(d.permission, "step %d (%s %v): %s", i+1, s.Tool, s.Value, d.reason), nil
			}
		}
		return allow(), nil
	}
	pt := e.catalog().points[o.Target.ToolName()]
	if t.Kind == ToolCancel {
		if clearsAt, err := e.breakerBlocks(pt); err != nil {
			blocked := deny(promcp.SourceUnreachable, "the device does not answer: %v", err)
			blocked.clearsAt = clearsAt
			return blocked, pt
		}
		return allow(), pt
	}
	d := e.dryRun(ctx, pt, caller, in)
	if d.permission == promcp.RequiresHumanApproval {
		return deny(promcp.RequiresHumanApproval, "%s; a start_* cannot ask a person for each of its writes, so it is not offered", d.reason), pt
	}
	if _, driving := e.ops.running(pt); driving != nil && d.permission == promcp.Allowed {
		return deny(promcp.PolicyDenied, "%s is being driven by operation %s; cancel it with %s first", pt.tool, driving.rec.ID, driving.o.CancelTool()), pt
	}
	return d, pt
}

func (e *Engine) opCandidate(ctx context.Context, t Tool, driven *point, m match, reasons []string, d decision, now time.Time) promcp.Candidate {
	o := t.Operation
	cand := promcp.Candidate{
		Capability: t.Name, Source: e.deviceID(), Confidence: m.confidence, Permission: d.permission,
		CurrentState: promcp.CurrentState{Timestamp: promcp.Time(now)},
		Constraints:  promcp.Constraints{EnumValues: []string{}},
		SideEffects:  append([]string{}, o.SideEffects...),
		DeviceID:     e.deviceID(), MatchReasons: reasons,
		ValidUntil: promcp.Time(now.Add(limitedValidity)),
	}
	cand.Constraints.MinRole, cand.Constraints.Roles = roleConstraint(func(r manifest.Role) bool {
		return e.opRoleAccess(o, t.Kind, r).permission == promcp.Allowed
	})
	var est time.Duration
	if driven != nil {
		cand.CurrentState = e.currentState(ctx, driven)
		cand.SideEffects = append(cand.SideEffects, sideEffects(driven.c)...)
		cand.ValidUntil = promcp.Time(e.validUntil(driven, d, now))
		est = 3 * driven.estimatedLatency()
		if t.Kind == ToolStart {
			cand.Constraints.Unit = unitOf(driven.c)
			if driven.c.EnumValues != nil {
				cand.Constraints.EnumValues = driven.c.EnumValues
			}
			if driven.c.Range != nil {
				cand.Constraints.Min, cand.Constraints.Max = e.effectiveRange(driven)
			}
		}
	} else {
		for _, s := range o.Steps {
			cand.SideEffects = append(cand.SideEffects, stepSideEffects(s)...)
			target := s.Tool
			if s.Start != nil {
				target = s.Start.Target.ToolName()
			}
			est += 3 * e.catalog().points[target].estimatedLatency()
		}
	}
	cand.EstimatedLatencyMs = int64(math.Ceil(float64(est) / float64(time.Millisecond)))
	return cand
}
