package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Sequences (sagas): the steps run in order, each through its own tool with
// all its checks and a key derived from the sequence's; when one fails, the
// steps that acted are undone in reverse order. Derived keys make a retried
// sequence act at most once per step and per undo: a step that acted answers
// its first outcome, one that was refused tries again.

// stepKey derives the idempotency key of a sequence's step or undo n from
// the sequence's key.
func stepKey(key, what string, n int) string {
	if len(key) > 96 {
		sum := sha256.Sum256([]byte(key))
		key = hex.EncodeToString(sum[:16])
	}
	return fmt.Sprintf("%s/%s-%d", key, what, n)
}

// Sequence answers a sequence's do_* tool. The error is non-nil only for an
// unknown tool.
func (e *Engine) Sequence(ctx context.Context, caller Caller, tool string, req promcp.SequenceRequest) (promcp.SequenceResponse, error) {
	o, err := e.operation(tool, ToolSequence)
	if err != nil {
		return promcp.SequenceResponse{}, err
	}
	e.touch()
	key := req.IdempotencyKey
	if key == "" {
		key = promcp.NewUUID()
	}
	outcome := "" // the audit line's, when not the permission's
	refuse := func(perm promcp.Permission, format string, args ...any) (promcp.SequenceResponse, error) {
		resp := e.sequenceAnswer(o, key)
		resp.Permission, resp.Reason = perm, fmt.Sprintf(format, args...)
		e.log.Info("sequence refused", "tool", tool, "key", key, "permission", perm, "reason", resp.Reason, "caller", caller.Identity)
		e.auditRefusedOp(caller, tool, map[string]any{"idempotency_key": req.IdempotencyKey}, key, perm, resp.Reason, outcome)
		return resp, nil
	}
	// every step's role before the first acts: a step refused for the role
	// would only be refused after the steps before it acted
	if d := e.opRoleAccess(o, ToolSequence, caller.Role); d.permission != promcp.Allowed {
		return refuse(d.permission, "%s", d.reason)
	}
	fp := fingerprint(tool, nil)
	// that call holds the key until its steps (and undos) have ended, which
	// has no bound known here; a call with no deadline waits for as long as
	// the steps' own transactions may take
	var steps time.Duration
	for _, s := range o.Steps {
		if s.Do != nil {
			steps += s.Do.Timeout()
		} else {
			steps += s.Start.Target.Timeout()
		}
	}
	release, err := e.claim(ctx, key, fp, steps)
	if err != nil {
		perm, reason, busy := keyBusyAnswer(err, key, fp, "", time.Time{})
		outcome = busy
		return refuse(perm, "%s", reason)
	}
	defer release()
	op, rec, found := e.ops.byKeyGet(key)
	switch {
	case found && rec.Fingerprint != fp:
		return refuse("", "idempotency_key %q was already used for %s; use a new key for a new action", key, rec.Tool)
	case found && len(rec.Answer) > 0:
		var resp promcp.SequenceResponse
		if err := json.Unmarshal(rec.Answer, &resp); err != nil {
			return refuse("", "the first answer for idempotency_key %q cannot be read: %v", key, err)
		}
		e.log.Info("sequence replayed", "tool", tool, "key", key)
		return resp, nil
	case found:
		// interrupted by a restart: run again; the steps that acted replay
		e.ops.update(op, func(r *OperationRecord) { r.State, r.Reason, r.Ended = promcp.OpRunning, "", time.Time{} })
	default:
		if _, used := e.idem.Load(key); used {
			return refuse("", "idempotency_key %q was already used for a do_* call; use a new key for a new action", key)
		}
		now := e.now()
		op = &runningOp{o: o, changed: make(chan struct{}), rec: OperationRecord{
			ID: promcp.NewUUID(), Tool: tool, Key: key, Fingerprint: fp, Caller: caller.Identity, Role: caller.Role,
			State: promcp.OpRunning, Started: now, Updated: now,
		}}
		if err := e.ops.add(op); err != nil {
			return refuse("", "could not record the sequence, so nothing was done: %v", err)
		}
	}

	resp := e.sequenceAnswer(o, key)
	marks := e.safeMarks(o)
	failed := -1
	// Interrupted by a restart, it is not run forward once it had begun
	// undoing, or once the safe state has driven its points since (in this
	// process: after the restart): the steps undone would replay as done,
	// and the rest act.
	stopped, run := "", o.Steps
	switch {
	case !found:
	case e.undoBegun(key, len(o.Steps)):
		stopped = "was undoing its steps after one failed"
	case drivenSince(marks):
		stopped = "ran, and the safe state has driven its points since"
	}
	if stopped != "" {
		run = nil
	}
	for i, s := range run {
		out, ok := promcp.StepOutcome{Tool: s.Tool, Arguments: stepArguments(s), Status: string(promcp.StatusFailed), Reason: "not run: the safe state came first"}, false
		if !safeSince(marks) {
			out, ok = e.sequenceStep(ctx, caller, s, stepKey(key, "step", i+1), marks)
		}
		out.Step = i + 1
		resp.Steps = append(resp.Steps, out)
		if !ok {
			failed = i
			break
		}
		resp.SideEffects = append(resp.SideEffects, stepSideEffects(s)...)
	}
	switch {
	case stopped != "":
		failed = 0 // for the record's state
		resp.Outcome = promcp.SequenceCompensationFailed
		resp.Reason = fmt.Sprintf("physmcpd stopped while this sequence (started %s) %s, "+
			"so nothing more was done: the device may be left between states; read before acting", promcp.Time(rec.Started), stopped)
	case failed < 0:
		resp.Status, resp.Outcome = promcp.StatusSuccess, promcp.SequenceCompleted
		resp.Compensable, resp.CompensationHint = e.sequenceUndo(o, resp.Steps)
	default:
		n := failed + 1
		resp.FailedStep = &n
		bad := resp.Steps[failed]
		resp.Permission = bad.Permission
		for _, s := range o.Steps[n:] {
			resp.Steps = append(resp.Steps, promcp.StepOutcome{Step: len(resp.Steps) + 1, Tool: s.Tool, Arguments: stepArguments(s), Status: "skipped"})
		}
		resp.Outcome = promcp.SequenceCompensated
		undone := failed // the steps undone: those before the failed one, and it too when it may have acted
		if e.stepMayHaveActed(bad) {
			undone++
		}
		// Undoing must not stop when the caller does (a client that went
		// away, a cancelled call): that would leave the device between states.
		undoCtx := context.WithoutCancel(ctx)
		stopped := false
		for j := undone - 1; j >= 0; j-- {
			if stopped = safeSince(marks); stopped {
				// undoing now would undo the safe state too
				resp.Outcome = promcp.SequenceCompensationFailed
				break
			}
			c, ok := e.undoStep(undoCtx, caller, o.Steps[j], resp.Steps[j], stepKey(key, "undo", j+1), marks)
			c.Step = j + 1
			resp.Compensations = append(resp.Compensations, c)
			if !ok {
				resp.Outcome = promcp.SequenceCompensationFailed
			}
		}
		resp.Reason = fmt.Sprintf("step %d (%s) failed: %s", n, bad.Tool, bad.Reason)
		switch {
		case stopped:
			resp.Reason += fmt.Sprintf("; %s, so nothing was undone after it: the device is left between states, read before acting", safeCame)
		case resp.Outcome != promcp.SequenceCompensated:
			resp.Reason += "; an undo failed too, so the device is left between states: see compensations, and read before acting"
		case undone > failed:
			resp.Reason += fmt.Sprintf("; step %d may have acted all the same, so steps 1..%d were undone in reverse order", n, undone)
		case failed > 0:
			resp.Reason += fmt.Sprintf("; steps 1..%d were undone in reverse order", failed)
		}
	}
	resp.Timestamp = promcp.Time(e.now())
	answer, err := json.Marshal(resp)
	if err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("the answer could not be recorded (%v): a retry with this key runs the steps again, each answering its first outcome", err))
	}
	state := promcp.OpSucceeded
	if failed >= 0 {
		state = promcp.OpFailed
	}
	e.ops.update(op, func(r *OperationRecord) {
		r.Answer, r.State, r.Reason, r.Ended, r.Progress = answer, state, resp.Reason, e.now(), 1
	})
	e.log.Info("sequence ended", "tool", tool, "key", key, "outcome", resp.Outcome, "failed_step", resp.FailedStep)
	return resp, nil
}

// undoBegun says whether an undo of sequence key (of n steps) has been
// recorded: a do_* undo records its intent before it writes. A do_cancel_*
// undo records its outcome only after its write, so a restart between the
// two is not seen.
func (e *Engine) undoBegun(key string, n int) bool {
	for j := 1; j <= n; j++ {
		if _, ok := e.idem.Load(stepKey(key, "undo", j)); ok {
			return true
		}
	}
	return false
}

func (e *Engine) sequenceAnswer(o *manifest.Operation, key string) promcp.SequenceResponse {
	return promcp.SequenceResponse{
		DoResponse: promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: key, SideEffects: []string{}, Timestamp: promcp.Time(e.now()), DeviceID: e.deviceID()},
		Steps:      []promcp.StepOutcome{}, Compensations: []promcp.StepOutcome{},
	}
}

func stepArguments(s *manifest.Step) map[string]any {
	args := map[string]any{"value": s.Value}
	if s.DurationMs > 0 {
		args["duration_ms"] = s.DurationMs
	}
	return args
}

func stepSideEffects(s *manifest.Step) []string {
	if s.Do != nil {
		return s.Do.SideEffects
	}
	return append(append([]string{}, s.Start.SideEffects...), s.Start.Target.SideEffects...)
}

func doOutcome(tool string, args map[string]any, key string, r promcp.DoResponse) promcp.StepOutcome {
	return promcp.StepOutcome{Tool: tool, Arguments: args, IdempotencyKey: key, Status: string(r.Status), Permission: r.Permission,
		Reason: r.Reason, Applied: r.AppliedValue, Previous: r.PreviousValue}
}

// safeCame says why a sequence stopped acting.
const safeCame = "the safe state (start-up, shutdown, the dead man, a bus that opened) drove the device while the sequence ran"

// safeMarksKey carries a sequence's safe marks to its steps' and undos'
// do_* (not to an operation a step starts, which the safe state stops),
// which check them under the write turn: the safe state may come between
// the sequence's look and the write.
type safeMarksKey struct{}

// safeMarks is, for each site o's steps and undos write, how many times the
// safe state has driven it so far.
func (e *Engine) safeMarks(o *manifest.Operation) map[*site]uint64 {
	points := e.catalog().points
	marks := map[*site]uint64{}
	for _, s := range o.Steps {
		tools := []string{s.Tool}
		if s.Start != nil {
			tools[0] = s.Start.Target.ToolName()
		}
		if s.Compensate != nil {
			tools = append(tools, s.Compensate.Tool)
		}
		for _, t := range tools {
			if pt, ok := points[t]; ok {
				marks[pt.site] = pt.site.safe.Load()
			}
		}
	}
	return marks
}

// safeSince says whether the safe state has driven one of the sites marked
// since: a sequence does, and undoes, nothing after it.
func safeSince(marks map[*site]uint64) bool {
	for s, n := range marks {
		if s.safe.Load() != n {
			return true
		}
	}
	return false
}

// drivenSince says whether the safe state has driven a site marked in
// this process (a mark above zero).
func drivenSince(marks map[*site]uint64) bool {
	for _, n := range marks {
		if n > 0 {
			return true
		}
	}
	return false
}

// stepMayHaveActed says whether a failed step may have acted all the same:
// its write's outcome is unknown (its key is still in doubt), or the
// operation it started still runs, wrote, or failed at a write whose outcome
// is unknown. An operation that wrote nothing is not cancelled: that would
// drive its point to the safe value, which the step never asked for.
func (e *Engine) stepMayHaveActed(out promcp.StepOutcome) bool {
	if out.OperationID == "" {
		return e.keyInDoubt(out.IdempotencyKey)
	}
	_, rec, _, ok := e.ops.get(out.OperationID)
	return !ok || rec.State == promcp.OpRunning || rec.Writes > 0 || e.keyInDoubt(opWriteKey(rec.ID, rec.Writes+1))
}

// sequenceStep runs one step under key; its do_* writes nothing once the
// safe state has moved past marks.
func (e *Engine) sequenceStep(ctx context.Context, caller Caller, s *manifest.Step, key string, marks map[*site]uint64) (promcp.StepOutcome, bool) {
	args := stepArguments(s)
	if s.Do != nil {
		r := e.do(context.WithValue(ctx, safeMarksKey{}, marks), caller, e.catalog().points[s.Tool], promcp.DoRequest{Value: s.Value, IdempotencyKey: key}, nil)
		return doOutcome(s.Tool, args, key, r), r.Status != promcp.StatusFailed
	}
	r, err := e.Start(ctx, caller, s.Tool, promcp.StartRequest{Value: s.Value, DurationMs: s.DurationMs, IdempotencyKey: key})
	out := promcp.StepOutcome{Tool: s.Tool, Arguments: args, IdempotencyKey: key, Status: string(r.Status), Permission: r.Permission,
		Reason: r.Reason, Applied: r.TargetValue, Previous: r.PreviousValue}
	if err != nil || r.OperationID == nil {
		if err != nil {
			out.Status, out.Reason = string(promcp.StatusFailed), err.Error()
		}
		return out, false
	}
	out.OperationID = *r.OperationID
	if !s.Wait {
		return out, true
	}
	for {
		st, err := e.Status(ctx, caller, s.Start.StatusTool(), promcp.StatusRequest{OperationID: out.OperationID, WaitMs: promcp.MaxWaitMs}, nil)
		if err != nil || ctx.Err() != nil {
			out.Status, out.Reason = string(promcp.OpFailed), fmt.Sprintf("stopped waiting for operation %s: %v", out.OperationID, context.Cause(ctx))
			return out, false
		}
		if st.State != promcp.OpRunning {
			out.Status, out.Reason = string(st.State), st.Reason
			return out, st.State == promcp.OpSucceeded
		}
	}
}

// undoStep undoes a step that acted: its compensate call, else for a do_*
// its own compensation (the previous value written back) and for a start_*
// its do_cancel_*. Its do_* writes nothing once the safe state has moved
// past marks.
func (e *Engine) undoStep(ctx context.Context, caller Caller, s *manifest.Step, done promcp.StepOutcome, key string, marks map[*site]uint64) (promcp.StepOutcome, bool) {
	tool, args := "", map[string]any{}
	switch {
	case s.Compensate != nil:
		tool, args["value"] = s.Compensate.Tool, s.Compensate.Value
	case s.Start != nil:
		args["operation_id"] = done.OperationID
		r, err := e.Cancel(ctx, caller, s.Start.CancelTool(), promcp.CancelRequest{OperationID: done.OperationID, IdempotencyKey: key})
		if err != nil {
			r.Status, r.Reason = promcp.StatusFailed, err.Error()
		}
		return doOutcome(s.Start.CancelTool(), args, key, r.DoResponse), r.Status != promcp.StatusFailed
	case done.Previous == nil || s.Do.Compensable != nil && !*s.Do.Compensable:
		return promcp.StepOutcome{Tool: s.Tool, Arguments: args, IdempotencyKey: key, Status: string(promcp.StatusFailed),
			Reason: "this step cannot be undone: its previous value is unknown or it is not compensable"}, false
	default:
		tool, args["value"] = s.Tool, done.Previous
	}
	r := e.do(context.WithValue(ctx, safeMarksKey{}, marks), caller, e.catalog().points[tool], promcp.DoRequest{Value: args["value"], IdempotencyKey: key}, nil)
	return doOutcome(tool, args, key, r), r.Status != promcp.StatusFailed
}

// sequenceUndo says whether a completed sequence can be undone and how: the
// steps' undo calls in reverse order.
func (e *Engine) sequenceUndo(o *manifest.Operation, steps []promcp.StepOutcome) (bool, *string) {
	var calls []string
	for j := len(o.Steps) - 1; j >= 0; j-- {
		s, done := o.Steps[j], steps[j]
		switch {
		case s.Compensate != nil:
			calls = append(calls, fmt.Sprintf("%s value=%v", s.Compensate.Tool, s.Compensate.Value))
		case s.Start != nil:
			calls = append(calls, fmt.Sprintf("%s operation_id=%s", s.Start.CancelTool(), done.OperationID))
		case done.Previous == nil || s.Do.Compensable != nil && !*s.Do.Compensable:
			return false, nil
		default:
			calls = append(calls, fmt.Sprintf("%s value=%v", s.Tool, done.Previous))
		}
	}
	hint := strings.Join(calls, "; then ")
	return true, &hint
}
