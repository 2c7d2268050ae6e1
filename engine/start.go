package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Outcomes of operation writes in the audit trail (the steps of a ramp are
// ordinary do_* writes, audited as such).
const (
	// OutcomeCancelled: do_cancel_* drove the point to its safe value.
	OutcomeCancelled = "cancelled"
	// OutcomeRunEnded: a run operation wrote its end value.
	OutcomeRunEnded = "run_ended"
)

func (e *Engine) operation(tool string, kind ToolKind) (*manifest.Operation, error) {
	for _, t := range e.catalog().tools {
		if t.Name == tool && t.Kind == kind {
			return t.Operation, nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownTool, tool)
}

// opAccess checks the caller's role against the operation's minimum role
// (and the policy's default); the driven point's own checks come on top.
func (e *Engine) opAccess(o *manifest.Operation, role manifest.Role) decision {
	if role == manifest.RoleViewer {
		return deny(promcp.PermissionInsufficient, "%s acts on the device; the caller has role viewer (read_* and can_do only)", o.Name)
	}
	min := o.RequiresPermission
	if min == "" {
		min = manifest.RoleNone
	}
	if def := e.p.DefaultRole(); def.Rank() > min.Rank() {
		min = def
	}
	if !role.AtLeast(min) {
		return deny(promcp.PermissionInsufficient, "%s requires role %s or higher; the caller has %s", o.Name, min, roleName(role))
	}
	return allow()
}

// Start answers a start_* tool: it checks the request as a do_* of the
// driven point would be checked, records the operation and answers at once;
// the writes follow in the background. The error is non-nil only for an
// unknown tool.
func (e *Engine) Start(ctx context.Context, caller Caller, tool string, req promcp.StartRequest) (promcp.StartResponse, error) {
	o, err := e.operation(tool, ToolStart)
	if err != nil {
		return promcp.StartResponse{}, err
	}
	e.touch()
	pt := e.catalog().points[o.Target.ToolName()]
	key := req.IdempotencyKey
	if key == "" {
		key = promcp.NewUUID()
	}
	outcome := "" // the audit line's, when not the permission's
	refuse := func(perm promcp.Permission, format string, args ...any) (promcp.StartResponse, error) {
		resp := e.startAnswer(o, key)
		resp.Status, resp.Permission, resp.Reason = promcp.OpFailed, perm, fmt.Sprintf(format, args...)
		resp.SideEffects = []string{}
		e.log.Info("start refused", "tool", tool, "key", key, "permission", perm, "reason", resp.Reason, "caller", caller.Identity)
		e.auditRefusedOp(caller, tool, map[string]any{"value": req.Value, "duration_ms": req.DurationMs, "idempotency_key": req.IdempotencyKey}, key, perm, resp.Reason, outcome)
		return resp, nil
	}
	value, perm, verr := validate(pt.c, req.Value)
	if verr != nil {
		return refuse(perm, "%v", verr)
	}
	if r := o.Run; r != nil && (req.DurationMs < 1 || req.DurationMs > r.MaxDurationMs) {
		return refuse(promcp.OutOfRange, "duration_ms must be within 1..%d, got %d", r.MaxDurationMs, req.DurationMs)
	}
	if o.Run == nil && req.DurationMs != 0 {
		return refuse("", "duration_ms applies to a run; %s is a %s", tool, o.Shape())
	}
	fp := fingerprint(tool, map[string]any{"value": value, "duration_ms": req.DurationMs})
	// that call answers once it has read the point (and a move's source)
	took := pt.c.Timeout()
	if mv := o.Move; mv != nil {
		took += mv.Source.Timeout()
	}
	release, err := e.claim(ctx, key, fp, took)
	if err != nil {
		perm, reason, busy := keyBusyAnswer(err, key, fp, "", e.now().Add(took))
		outcome = busy
		return refuse(perm, "%s", reason)
	}
	defer release()
	if _, rec, ok := e.ops.byKeyGet(key); ok {
		if rec.Fingerprint != fp {
			return refuse("", "idempotency_key %q was already used for a different request; use a new key for a new action", key)
		}
		var resp promcp.StartResponse
		if err := json.Unmarshal(rec.Answer, &resp); err != nil {
			return refuse("", "the first answer for idempotency_key %q cannot be read (%v); operation %s is %s", key, err, rec.ID, rec.State)
		}
		e.log.Info("start replayed", "tool", tool, "key", key, "operation", rec.ID)
		return resp, nil
	}
	if _, used := e.idem.Load(key); used {
		return refuse("", "idempotency_key %q was already used for a do_* call; use a new key for a new action", key)
	}
	if d := e.opAccess(o, caller.Role); d.permission != promcp.Allowed {
		return refuse(d.permission, "%s", d.reason)
	}
	d := e.evaluate(pt, caller, value)
	if d.permission == promcp.RequiresHumanApproval {
		return refuse(d.permission, "%s; a start_* cannot ask a person for each of its writes, so it is not offered for %s", d.reason, pt.tool)
	}
	if d.permission != promcp.Allowed {
		return refuse(d.permission, "%s", d.reason)
	}
	if n, driving := e.ops.running(pt); driving != nil {
		return refuse(promcp.PolicyDenied, "%s is already being driven by operation %s of %s; cancel it with %s first", pt.tool, driving.rec.ID, driving.rec.Tool, driving.o.CancelTool())
	} else if n >= MaxRunning {
		return refuse(promcp.PolicyDenied, "%d operations are running, the most physmcpd runs at once; wait for one to end", n)
	}
	if why := e.ops.excludes(pt, key, nil); why != "" {
		return refuse(promcp.PolicyDenied, "%s", why)
	}
	prev, err := e.readFresh(ctx, pt)
	if err != nil {
		return refuse(failurePermission(err), "could not read %s, so nothing was started: %v", pt.tool, err)
	}
	now := e.now()
	rec := OperationRecord{
		ID: promcp.NewUUID(), Tool: tool, Key: key, Fingerprint: fp, Caller: caller.Identity, Role: caller.Role,
		State: promcp.OpRunning, Target: d.value, DurationMs: req.DurationMs, From: prev.value, Started: now, Updated: now,
	}
	if mv := o.Move; mv != nil {
		src := e.catalog().points[mv.Source.ToolName()]
		r, err := e.readFresh(ctx, src)
		if err != nil {
			return refuse(failurePermission(err), "could not read %s, which tells when the move is done, so nothing was started: %v", src.tool, err)
		}
		rec.ObservedFrom = r.value
	}
	expected, timeout, ok := e.plan(o, pt, prev.value, d.value, req.DurationMs)
	if !ok {
		return refuse(promcp.OutOfRange, "%s holds %v, which is not a number, so a ramp cannot start from it", pt.tool, prev.value)
	}
	rec.Expected, rec.Deadline = now.Add(expected), now.Add(timeout)

	resp := e.startAnswer(o, key)
	id := rec.ID
	resp.Status, resp.OperationID = promcp.OpRunning, &id
	resp.TargetValue, resp.PreviousValue = d.value, prev.value
	exp, dl := promcp.Time(rec.Expected), promcp.Time(rec.Deadline)
	resp.ExpectedCompletion, resp.Deadline = &exp, &dl
	resp.Warnings = d.warnings
	if d.clamped {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("the policy clamps %v to %v; the operation drives %s to %v", value, d.value, pt.tool, d.value))
	}
	if rec.Answer, err = json.Marshal(resp); err != nil {
		return refuse("", "encode the answer: %v", err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	op := &runningOp{rec: rec, o: o, pt: pt, changed: make(chan struct{}), stop: stop, done: make(chan struct{})}
	if err := e.ops.add(op); err != nil {
		stop()
		return refuse("", "could not record the operation, so nothing was started: %v", err)
	}
	e.log.Info("operation started", "tool", tool, "operation", id, "key", key, "from", prev.value, "target", d.value, "expected", exp, "caller", caller.Identity)
	go e.run(runCtx, op)
	return resp, nil
}

func (e *Engine) startAnswer(o *manifest.Operation, key string) promcp.StartResponse {
	resp := promcp.StartResponse{
		IdempotencyKey: key, SideEffects: append([]string{}, o.SideEffects...), StatusTool: o.StatusTool(),
		Timestamp: promcp.Time(e.now()), DeviceID: e.deviceID(),
	}
	if len(o.Target.SideEffects) > 0 {
		resp.SideEffects = append(resp.SideEffects, o.Target.SideEffects...)
	}
	return resp
}

// plan gives how long an operation should take and when it times out: a
// ramp's steps, a run's duration, a move's timeout (it has no estimate).
// The default timeout is twice the expected time plus 30 s.
func (e *Engine) plan(o *manifest.Operation, pt *point, from, target any, durationMs int) (expected, timeout time.Duration, ok bool) {
	switch {
	case o.Ramp != nil:
		f, fok := drivers.AsFloat(from)
		t, _ := drivers.AsFloat(target)
		if !fok {
			return 0, 0, false
		}
		steps := math.Ceil(math.Abs(t-f) / o.Ramp.Step())
		expected = time.Duration(max(steps-1, 0)) * time.Duration(o.Ramp.StepMs) * time.Millisecond
	case o.Run != nil:
		expected = time.Duration(durationMs) * time.Millisecond
	case o.Move != nil:
		expected = time.Duration(o.TimeoutMs) * time.Millisecond
	}
	timeout = 2*expected + 30*time.Second
	if o.TimeoutMs > 0 {
		timeout = time.Duration(o.TimeoutMs) * time.Millisecond
	}
	return expected, timeout, true
}

// run is an operation's runner: one goroutine per running operation, at most
// MaxRunning.
func (e *Engine) run(ctx context.Context, op *runningOp) {
	defer close(op.done)
	var state promcp.OpState
	var reason string
	switch {
	case op.o.Ramp != nil:
		state, reason = e.ramp(ctx, op)
	case op.o.Run != nil:
		state, reason = e.runFor(ctx, op)
	case op.o.Move != nil:
		state, reason = e.move(ctx, op)
	}
	if state != "" {
		e.ops.end(op, state, reason)
	}
}

// stepWrite is write number n of the operation: an ordinary write of the
// driven point (all the checks of its do_*, idempotent by a key derived from
// the operation's id and n, audited), made even if the operation is halted
// meanwhile, because a write that has started must finish. A write that
// failed says why (failure), and whether it may have been applied all the
// same (inDoubt: its outcome is unknown).
func (e *Engine) stepWrite(ctx context.Context, op *runningOp, value any, n int) (failure string, inDoubt bool) {
	caller := Caller{Identity: op.rec.Caller, Role: op.rec.Role}
	key := opWriteKey(op.rec.ID, n)
	resp := e.do(context.WithoutCancel(ctx), caller, op.pt, promcp.DoRequest{Value: value, IdempotencyKey: key}, op)
	if resp.Status != promcp.StatusFailed {
		e.ops.update(op, func(r *OperationRecord) { r.Written, r.Writes = resp.AppliedValue, n })
		return "", false
	}
	if e.keyInDoubt(key) {
		return fmt.Sprintf("write %d (%v) has no known outcome: %s: %s; the point holds %v or the last value written before it: read it", n, value, resp.Permission, resp.Reason, value), true
	}
	return fmt.Sprintf("write %d (%v) was not applied: %s: %s; the point keeps the last value written", n, value, resp.Permission, resp.Reason), false
}

// opWriteKey is the idempotency key of write n of operation id.
func opWriteKey(id string, n int) string { return fmt.Sprintf("%s/%d", id, n) }

// keyInDoubt says whether key's write left with no known outcome, so the
// device may hold its value.
func (e *Engine) keyInDoubt(key string) bool {
	rec, ok := e.idem.Load(key)
	return ok && rec.InDoubt
}

// ramp writes from the start value to the target in steps of at most the
// ramp's step, one per step_ms. Each step moves from the last commanded
// value, so a late step never makes the rate faster than declared.
func (e *Engine) ramp(ctx context.Context, op *runningOp) (promcp.OpState, string) {
	from, _ := drivers.AsFloat(op.rec.From)
	target, _ := drivers.AsFloat(op.rec.Target)
	step, interval := op.o.Ramp.Step(), time.Duration(op.o.Ramp.StepMs)*time.Millisecond
	span := math.Abs(target - from)
	last := from
	for n := 1; ; n++ {
		if last == target {
			return promcp.OpSucceeded, ""
		}
		if e.now().After(op.rec.Deadline) {
			return promcp.OpFailed, fmt.Sprintf("timed out at %s after %d writes, the last %v; the point keeps it", promcp.Time(op.rec.Deadline), n-1, last)
		}
		next := target
		if math.Abs(target-last) > step*(1+1e-9) { // floating-point steps land on the target, not a hair short
			next = last + math.Copysign(step, target-last)
		}
		if op.pt.c.DataType == manifest.TypeInt && next != target {
			// whole steps toward the target, never past it
			if r := math.Round(next); r != last {
				next = r
			} else {
				next = last + math.Copysign(1, target-last)
			}
		}
		var value any = next
		if op.pt.c.DataType == manifest.TypeInt {
			value = int64(next)
		}
		if failure, _ := e.stepWrite(ctx, op, value, n); failure != "" {
			return promcp.OpFailed, failure
		}
		last = next
		if span > 0 {
			e.ops.update(op, func(r *OperationRecord) { r.Progress = math.Abs(last-from) / span })
		}
		if last == target {
			return promcp.OpSucceeded, ""
		}
		if sleep(ctx, interval) != nil {
			return "", ""
		}
	}
}

// runFor writes the value, holds it for the duration and writes the end
// value (then, else the safe value) the way the safe state writes: stopping
// must not wait for a cooldown or a rate window. A failed end write is tried
// again every second until the deadline. A first write whose outcome is
// unknown may have started what nothing would then stop: the end value is
// written at once, and the run fails.
func (e *Engine) runFor(ctx context.Context, op *runningOp) (promcp.OpState, string) {
	failure, inDoubt := e.stepWrite(ctx, op, op.rec.Target, 1)
	if failure != "" && !inDoubt {
		return promcp.OpFailed, failure
	}
	if failure == "" {
		end := op.rec.Started.Add(time.Duration(op.rec.DurationMs) * time.Millisecond)
		if sleep(ctx, end.Sub(e.now())) != nil {
			return "", ""
		}
	}
	then := op.o.Run.Then
	if then == nil {
		then, _ = op.o.Target.SafeValueOf()
	}
	caller := Caller{Identity: op.rec.Caller, Role: op.rec.Role}
	for {
		r, err := e.driveSafe(context.WithoutCancel(ctx), op.pt, then, fmt.Sprintf("%s operation %s ended after %d ms", op.rec.Tool, op.rec.ID, op.rec.DurationMs), caller, OutcomeRunEnded, nil, slog.LevelError)
		if err == nil {
			e.ops.update(op, func(rec *OperationRecord) { rec.Written, rec.Writes = r.AppliedValue, 2 })
			if failure != "" {
				return promcp.OpFailed, fmt.Sprintf("%s; the end value %v was written at once", failure, then)
			}
			return promcp.OpSucceeded, ""
		}
		if e.now().After(op.rec.Deadline) {
			return promcp.OpFailed, fmt.Sprintf("the run ended but its end value %v could not be written (%v); %s may still hold %v: check it, or cancel", then, err, op.pt.tool, op.rec.Target)
		}
		if sleep(ctx, time.Second) != nil {
			return "", ""
		}
	}
}

// move writes the value once and waits for the until reading to come within
// tolerance of it.
func (e *Engine) move(ctx context.Context, op *runningOp) (promcp.OpState, string) {
	mv := op.o.Move
	src := e.catalog().points[mv.Source.ToolName()]
	if failure, _ := e.stepWrite(ctx, op, op.rec.Target, 1); failure != "" {
		return promcp.OpFailed, failure
	}
	target, _ := drivers.AsFloat(op.rec.Target)
	from, _ := drivers.AsFloat(op.rec.ObservedFrom)
	for {
		r := e.observe(ctx, src)
		if v, ok := drivers.AsFloat(r.Value); ok && r.Quality != promcp.QualityError {
			if math.Abs(v-target) <= mv.Tolerance {
				return promcp.OpSucceeded, ""
			}
			if target != from {
				e.ops.update(op, func(rec *OperationRecord) { rec.Progress = max(0, (v-from)/(target-from)) })
			}
		}
		if e.now().After(op.rec.Deadline) {
			return promcp.OpFailed, fmt.Sprintf("timed out: %s reads %v %s, and the move waits for %v ± %v; %s keeps %v", src.tool, r.Value, r.Quality, target, mv.Tolerance, op.pt.tool, op.rec.Target)
		}
		if sleep(ctx, time.Duration(mv.Poll())*time.Millisecond) != nil {
			return "", ""
		}
	}
}

// Status answers a read_status_* tool. With req.WaitMs it holds the answer
// until the operation ends or the wait passes, and calls progress (when not
// nil) at each change and at least every second meanwhile. The error is
// non-nil only for an unknown tool.
func (e *Engine) Status(ctx context.Context, caller Caller, tool string, req promcp.StatusRequest, progress func(promcp.StatusResponse)) (promcp.StatusResponse, error) {
	o, err := e.operation(tool, ToolStatus)
	if err != nil {
		return promcp.StatusResponse{}, err
	}
	wait := time.Duration(min(max(req.WaitMs, 0), promcp.MaxWaitMs)) * time.Millisecond
	until := time.Now().Add(wait)
	for {
		op, rec, changed, ok := e.ops.get(req.OperationID)
		if !ok || op.o != o {
			return e.unknownOperation(o, req.OperationID), nil
		}
		resp := e.status(ctx, op, rec)
		left := time.Until(until)
		if rec.State != promcp.OpRunning || left <= 0 {
			return resp, nil
		}
		if progress != nil {
			progress(resp)
		}
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return resp, nil
		}
		t.Stop()
	}
}

func (e *Engine) unknownOperation(o *manifest.Operation, id string) promcp.StatusResponse {
	now := promcp.Time(e.now())
	return promcp.StatusResponse{
		Unit: unitOf(o.Target), Timestamp: now, Quality: promcp.QualityError, OperationID: id, State: promcp.OpUnknown,
		Reason: fmt.Sprintf("no operation %q of %s is known here (ids are kept 24 h)", id, o.StartTool()), DeviceID: e.deviceID(),
		Detail: "no such operation",
	}
}

// status is the answer for op: its record and the observed point now.
func (e *Engine) status(ctx context.Context, op *runningOp, rec OperationRecord) promcp.StatusResponse {
	observed := op.pt
	if mv := op.o.Move; mv != nil {
		observed = e.catalog().points[mv.Source.ToolName()]
	}
	r := e.observe(ctx, observed)
	ts := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		s := promcp.Time(t)
		return &s
	}
	progress := rec.Progress
	if op.o.Run != nil && rec.State == promcp.OpRunning && rec.Writes > 0 && rec.DurationMs > 0 {
		progress = max(progress, min(1, float64(e.now().Sub(rec.Started))/float64(time.Duration(rec.DurationMs)*time.Millisecond)))
	}
	return promcp.StatusResponse{
		Value: r.Value, Unit: r.Unit, Timestamp: r.Timestamp, Quality: r.Quality, Detail: r.Detail,
		OperationID: rec.ID, State: rec.State, Progress: progress, TargetValue: rec.Target, LastWritten: rec.Written, Writes: rec.Writes,
		StartedAt: ts(rec.Started), UpdatedAt: ts(rec.Updated), ExpectedCompletion: ts(rec.Expected), Deadline: ts(rec.Deadline), EndedAt: ts(rec.Ended),
		Reason: rec.Reason, Observed: observed.tool, DeviceID: e.deviceID(),
	}
}

// Cancel answers a do_cancel_* tool: it stops the operation (no write of it
// lands afterwards) and drives its point to the safe value, the way the safe
// state does: stopping must never wait for a cooldown or a rate window. An
// operation that has ended is not changed, but its point is still driven to
// the safe value: do_cancel_* is also the undo of a finished start_*. It is
// idempotent by key like any do_*. The error is non-nil only for an unknown tool.
func (e *Engine) Cancel(ctx context.Context, caller Caller, tool string, req promcp.CancelRequest) (promcp.CancelResponse, error) {
	o, err := e.operation(tool, ToolCancel)
	if err != nil {
		return promcp.CancelResponse{}, err
	}
	e.touch()
	pt := e.catalog().points[o.Target.ToolName()]
	key := req.IdempotencyKey
	if key == "" {
		key = promcp.NewUUID()
	}
	answer := func(resp promcp.DoResponse) promcp.CancelResponse {
		out := promcp.CancelResponse{DoResponse: resp, OperationID: req.OperationID, State: promcp.OpUnknown}
		if _, rec, _, ok := e.ops.get(req.OperationID); ok {
			out.State = rec.State
		}
		return out
	}
	outcome := "" // the audit line's, when not the permission's
	refuse := func(perm promcp.Permission, format string, args ...any) (promcp.CancelResponse, error) {
		resp := e.refuse(pt, key, perm, fmt.Sprintf(format, args...))
		e.auditRefusedOp(caller, tool, map[string]any{"operation_id": req.OperationID, "idempotency_key": req.IdempotencyKey}, key, perm, resp.Reason, outcome)
		return answer(resp), nil
	}
	if d := e.opAccess(o, caller.Role); d.permission != promcp.Allowed {
		return refuse(d.permission, "%s", d.reason)
	}
	fp := fingerprint(tool, req.OperationID)
	release, err := e.claim(ctx, key, fp, pt.c.Timeout())
	if err != nil {
		// that call answers once it has written the safe value
		perm, reason, busy := keyBusyAnswer(err, key, fp, "", e.now().Add(pt.c.Timeout()))
		outcome = busy
		return refuse(perm, "%s", reason)
	}
	defer release()
	if rec, ok := e.idem.Load(key); ok {
		if rec.Fingerprint != fp {
			return refuse("", "idempotency_key %q was already used for a different request; use a new key for a new action", key)
		}
		return answer(rec.Response), nil
	}
	op, _, _, ok := e.ops.get(req.OperationID)
	if !ok || op.o != o {
		return refuse("", "no operation %q of %s is known here; nothing was written", req.OperationID, o.StartTool())
	}
	e.ops.halt(op)
	e.ops.end(op, promcp.OpCancelled, fmt.Sprintf("cancelled by %s", caller.Identity))
	safe, _ := o.Target.SafeValueOf()
	resp, _ := e.driveSafe(ctx, pt, safe, fmt.Sprintf("%s of operation %s by %s", tool, req.OperationID, caller.Identity), caller, OutcomeCancelled, nil, slog.LevelError)
	resp.IdempotencyKey = key
	e.compensation(pt, &resp)
	if resp.Status != promcp.StatusFailed {
		resp.Reason = ""
	}
	if err := e.idem.Save(key, Record{Fingerprint: fp, Tool: tool, Caller: caller.Identity, Role: caller.Role, Response: resp, At: e.now()}); err != nil {
		resp.Warnings = append(resp.Warnings, outcomeWarning(err))
	}
	return answer(resp), nil
}
