package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// ApprovalRequest is what a person is asked to approve.
type ApprovalRequest struct {
	Tool          string
	Value         any
	PreviousValue any
	Unit          string
	SideEffects   []string
}

// Do answers a do_* tool. Refusals and failures are DoResponses with status
// failed and a reason; the error is non-nil only for an unknown tool. The
// steps run in the contract's order: input validation, idempotency, policy,
// write, read-back, record.
func (e *Engine) Do(ctx context.Context, caller Caller, tool string, req promcp.DoRequest) (resp promcp.DoResponse, err error) {
	pt, err := e.lookup(tool, manifest.KindDo)
	if err != nil {
		return promcp.DoResponse{}, err
	}
	e.touch()
	outcome, at, began := "", e.now(), time.Now()
	defer func() { e.auditDo(caller, pt, req, resp, outcome, at, time.Since(began)) }()
	key := req.IdempotencyKey
	if key == "" {
		key = promcp.NewUUID()
	}
	value, perm, verr := validate(pt.c, req.Value)
	if verr != nil {
		return e.refuse(pt, key, perm, verr.Error()), nil
	}

	fp := fingerprint(tool, value)
	release, _ := e.claim(key)
	defer release()
	if rec, ok := e.idem.Load(key); ok {
		if rec.Fingerprint != fp {
			return e.refuse(pt, key, "", fmt.Sprintf("idempotency_key %q was already used for a different request; use a new key for a new action", key)), nil
		}
		if !rec.InDoubt {
			e.log.Info("do replayed", "tool", tool, "key", key)
			outcome = OutcomeReplayed
			return rec.Response, nil
		}
		if resp, done := e.resolveInDoubt(ctx, pt, key, rec); done {
			if resp.Status != promcp.StatusFailed {
				outcome = OutcomeConfirmed
			}
			return resp, nil
		}
	}

	d := e.evaluate(pt, caller, value)
	if d.permission == promcp.RequiresHumanApproval {
		d = e.askApproval(ctx, pt, caller, d)
	}
	if d.permission != promcp.Allowed {
		e.log.Info("do refused", "tool", tool, "key", key, "permission", d.permission, "reason", d.reason, "caller", caller.Identity)
		return e.refuse(pt, key, d.permission, d.reason), nil
	}
	// Writes to one point take turns from here to the charge, and check the
	// limits again in turn: another call may have written meanwhile.
	defer e.serialiseWrites(pt)()
	if l := e.limits(pt); l.permission != promcp.Allowed {
		return e.refuse(pt, key, l.permission, l.reason), nil
	}

	prev, err := e.readFresh(ctx, pt)
	if err != nil {
		return e.refuse(pt, key, promcp.SourceUnreachable, fmt.Sprintf("could not read the current value, so nothing was written: %v", err)), nil
	}
	if il := e.interlocks(ctx, pt, d.value, true); il.permission != promcp.Allowed {
		e.log.Info("do refused by an interlock", "tool", tool, "key", key, "permission", il.permission, "reason", il.reason, "caller", caller.Identity)
		return e.refuse(pt, key, il.permission, il.reason), nil
	}

	resp = e.response(pt, key)
	resp.PreviousValue = prev.value
	resp.AppliedValue = d.value
	resp.Warnings = d.warnings
	// Record the intent before touching the device: if the write's outcome is
	// lost, a retry with this key checks the device instead of writing twice.
	intent := Record{Fingerprint: fp, Tool: pt.tool, Response: resp, At: e.now(), InDoubt: true}
	if err := e.idem.Save(key, intent); err != nil {
		return e.refuse(pt, key, "", fmt.Sprintf("could not record the request, so nothing was written: %v", err)), nil
	}

	werr := e.transact(ctx, pt, func(ctx context.Context) error { return pt.drv.Write(ctx, d.value) })
	if werr != nil {
		e.log.Warn("do write failed", "tool", tool, "key", key, "point", pt.drv.Describe(), "err", werr)
		failed := e.refuse(pt, key, promcp.SourceUnreachable, fmt.Sprintf("write failed: %v", werr))
		if errors.Is(werr, drivers.ErrTimeout) || errors.Is(werr, context.DeadlineExceeded) || errors.Is(werr, ErrDriverPanic) {
			failed.Reason += "; the device may have applied it: retry with the same idempotency_key to check without writing twice"
		}
		return failed, nil
	}
	var spendWarning string
	if err := e.charge(pt, e.now(), d.value); err != nil {
		spendWarning = fmt.Sprintf("the write could not be recorded for the cooldown and rate limits (%v): a restart may allow the next write early", err)
	}
	resp = e.finish(ctx, pt, key, fp, resp, d.value, d.clamped)
	if spendWarning != "" {
		resp.Warnings = append(resp.Warnings, spendWarning)
	}
	return resp, nil
}

// finish reads the point back after a write, completes and records the response.
func (e *Engine) finish(ctx context.Context, pt *point, key, fp string, resp promcp.DoResponse, written any, clamped bool) promcp.DoResponse {
	resp.Status = promcp.StatusSuccess
	if clamped {
		resp.Status = promcp.StatusPartial
	}
	back, err := e.readFresh(ctx, pt)
	switch {
	case err != nil:
		resp.AppliedValue = written
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("written, but the read-back failed (%v): verify with a read", err))
	case !sameValue(pt, back.value, written):
		resp.AppliedValue = back.value
		resp.Status = promcp.StatusPartial
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("wrote %v but the device reports %v", written, back.value))
	default:
		resp.AppliedValue = back.value
	}
	e.compensation(pt, &resp)
	resp.Timestamp = promcp.Time(e.now())
	if err := e.idem.Save(key, Record{Fingerprint: fp, Tool: pt.tool, Response: resp, At: e.now()}); err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("the outcome could not be recorded (%v): a retry with this key may act again", err))
	}
	e.log.Info("do applied", "tool", pt.tool, "key", key, "status", resp.Status, "previous", resp.PreviousValue, "applied", resp.AppliedValue)
	return resp
}

// resolveInDoubt settles a key whose earlier write had no known outcome: if
// the device already shows the requested value, that write happened and is
// recorded now; otherwise the call proceeds as new.
func (e *Engine) resolveInDoubt(ctx context.Context, pt *point, key string, rec Record) (promcp.DoResponse, bool) {
	cur, err := e.readFresh(ctx, pt)
	if err != nil {
		return e.refuse(pt, key, promcp.SourceUnreachable, fmt.Sprintf("an earlier call with this key may have written; the device cannot be read to check, so nothing was written: %v", err)), true
	}
	want := rec.Response.AppliedValue
	if !sameValue(pt, cur.value, want) {
		return promcp.DoResponse{}, false
	}
	if err := e.charge(pt, rec.At, want); err != nil {
		rec.Response.Warnings = append(rec.Response.Warnings, fmt.Sprintf("the write could not be recorded for the cooldown and rate limits: %v", err))
	}
	e.log.Info("do in-doubt write confirmed by read-back", "tool", pt.tool, "key", key)
	return e.finish(ctx, pt, key, rec.Fingerprint, rec.Response, want, rec.Response.Status == promcp.StatusPartial), true
}

func (e *Engine) longestRate(pt *point) (longest time.Duration) {
	for _, r := range e.rates(pt) {
		longest = max(longest, r.Per)
	}
	return longest
}

// readFresh reads the point from the device now, neither from the cache nor
// by joining a read already under way (which may have begun before a write):
// a write must start from, and report, what the device says now.
func (e *Engine) readFresh(ctx context.Context, pt *point) (*reading, error) {
	return e.measure(ctx, pt)
}

// askApproval asks the caller's person, when the transport can; without a way
// to ask, the call stays refused with requires_human_approval.
func (e *Engine) askApproval(ctx context.Context, pt *point, caller Caller, d decision) decision {
	if caller.Approve == nil {
		d.reason += "; this client cannot ask a person, so nothing was written"
		return d
	}
	prev := any(nil)
	if r := e.cached(pt); r != nil {
		prev = r.value
	}
	ok, err := caller.Approve(ctx, ApprovalRequest{Tool: pt.tool, Value: d.value, PreviousValue: prev, Unit: pt.c.Unit, SideEffects: pt.c.SideEffects})
	switch {
	case err != nil:
		d.reason = fmt.Sprintf("approval could not be obtained (%v); nothing was written", err)
	case !ok:
		d.reason = "a person declined the action; nothing was written"
	default:
		d.permission, d.reason = promcp.Allowed, ""
		d.warnings = append(d.warnings, "approved by a person")
	}
	return d
}

func (e *Engine) response(pt *point, key string) promcp.DoResponse {
	return promcp.DoResponse{
		Status:         promcp.StatusFailed,
		IdempotencyKey: key,
		SideEffects:    sideEffects(pt.c),
		Timestamp:      promcp.Time(e.now()),
		DeviceID:       e.deviceID(),
	}
}

// refuse is a failed response for a call that wrote nothing.
func (e *Engine) refuse(pt *point, key string, perm promcp.Permission, reason string) promcp.DoResponse {
	resp := e.response(pt, key)
	resp.Permission = perm
	resp.Reason = reason
	return resp
}

func sideEffects(c *manifest.Capability) []string {
	if len(c.SideEffects) == 0 {
		return []string{}
	}
	return append([]string(nil), c.SideEffects...)
}

// compensation fills compensable and the undo call: writing the previous
// value back, unless the manifest declares the action irreversible.
func (e *Engine) compensation(pt *point, resp *promcp.DoResponse) {
	if pt.c.Compensable != nil && !*pt.c.Compensable || resp.PreviousValue == nil {
		resp.Compensable = false
		return
	}
	resp.Compensable = true
	hint := fmt.Sprintf("%s value=%v", pt.tool, resp.PreviousValue)
	resp.CompensationHint = &hint
	resp.Compensation = &promcp.Compensation{Tool: pt.tool, Arguments: map[string]any{"value": resp.PreviousValue}}
}

// sameValue compares a read-back with what was written, allowing for the
// resolution of the encoding (float32 registers, scale steps, precision).
func sameValue(pt *point, got, want any) bool {
	g, gok := drivers.AsFloat(got)
	w, wok := drivers.AsFloat(want)
	if !gok || !wok {
		return got == want
	}
	tol := max(1e-6*math.Abs(w), 1e-9)
	if p := pt.c.Precision; p != nil {
		tol = max(tol, 0.5*math.Pow10(-*p))
	}
	if s := encodingStep(pt.c); s > 0 {
		tol = max(tol, s/2)
	}
	return math.Abs(g-w) <= tol
}

// encodingStep is the smallest change the binding can represent (its scale).
func encodingStep(c *manifest.Capability) float64 {
	switch b := c.Binding; {
	case b.Modbus != nil:
		switch b.Modbus.DataType {
		case manifest.MBFloat32, manifest.MBFloat64:
			return 0
		}
		return math.Abs(b.Modbus.Scale)
	case b.I2C != nil:
		return math.Abs(b.I2C.Scale)
	}
	return 0
}
