package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// safeValue is the value a do point is driven to at start-up, on shutdown and
// after the dead-man timeout: its safe_value, else for a GPIO output the
// logical value of its binding's safe_level.
func safeValue(c *manifest.Capability) (any, bool) { return c.SafeValueOf() }

// ApplySafeState writes every do point's safe value (points without one are
// left alone). In-doubt writes are settled first, because the safe value
// would overwrite the evidence a retry needs. The writes bypass the policy,
// rate limits and cooldowns, but each one that changes the device is charged
// to the point's limits (equipment protected by a cooldown is not cycled again
// right after), logged and audited with why as the reason. Every point is
// attempted; the error joins the failures.
func (e *Engine) ApplySafeState(ctx context.Context, why string) error {
	_, err := e.applySafeState(ctx, why, func(*point) bool { return true }, nil, slog.LevelError)
	return err
}

// ApplySafeStateOn is ApplySafeState for the do points on one bus: for a bus
// that was not open at start-up and has just opened.
func (e *Engine) ApplySafeStateOn(ctx context.Context, bus, why string) error {
	_, err := e.applySafeState(ctx, why, func(pt *point) bool { return pt.c.Binding.Bus == bus }, nil, slog.LevelError)
	return err
}

// applySafeState drives the do points on selects to their safe values, and
// returns the tools whose write failed (nothing written, or its outcome
// unknown), each logged at level. Once ended (nil: never) says so, the
// points not yet driven are left alone (driveSafe).
func (e *Engine) applySafeState(ctx context.Context, why string, on func(*point) bool, ended func() bool, level slog.Level) (unsafe []string, err error) {
	// A running operation would write again after the safe value.
	e.stopOperations(on, why)
	errs := []error{e.settleInDoubt(ctx, on)}
	cat := e.catalog()
	for _, t := range cat.tools {
		if t.Kind != ToolDo {
			continue
		}
		pt := cat.points[t.Name]
		if !on(pt) {
			continue
		}
		v, ok := safeValue(pt.c)
		if !ok {
			continue
		}
		pt.site.safe.Add(1)
		resp, err := e.driveSafe(ctx, pt, v, why, Caller{Identity: "physmcpd"}, OutcomeSafeState, ended, level)
		if errors.Is(err, errSafeEnded) {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pt.tool, err))
		}
		if resp.Status == promcp.StatusFailed {
			unsafe = append(unsafe, pt.tool)
		}
	}
	return unsafe, errors.Join(errs...)
}

// errSafeEnded: the safe state ended before it wrote the point.
var errSafeEnded = errors.New("the safe state ended before it wrote: a do_* call came meanwhile")

// driveSafe writes v to pt as the safe state does, for caller, audited with
// outcome, and answers the write as a do_* body. A failed write is logged at
// level. When ended (nil: never) says, under the write turn, that the safe
// state is over (a do_* call re-armed the dead man), nothing is written or
// audited and the error is errSafeEnded: a do_* takes the turn after its
// call re-arms, so a write it made meanwhile is not undone behind its back.
func (e *Engine) driveSafe(ctx context.Context, pt *point, v any, why string, caller Caller, outcome string, ended func() bool, level slog.Level) (resp promcp.DoResponse, err error) {
	at, began := e.now(), time.Now()
	value, _, verr := validate(pt.c, v)
	if verr != nil {
		return e.refuse(pt, "", "", verr.Error()), fmt.Errorf("safe value %v: %w", v, verr)
	}
	resp = e.response(pt, "")
	resp.Reason = why
	defer func() {
		if !errors.Is(err, errSafeEnded) {
			e.auditDo(caller, pt, promcp.DoRequest{Value: value}, resp, outcome, at, time.Since(began))
		}
	}()
	if l, ok := pt.site.pendingLate(e.now); ok {
		// The in-doubt frame could land after the safe value and undo it:
		// wait it out when the deadline allows, else write now and say so.
		if _, err := e.waitLate(ctx, l.until, l.reply); err != nil {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("%s may still reach the device until %s and undo this one (%v)",
				l.what(), promcp.Time(l.until), err))
		} else {
			pt.site.endWaited(l)
		}
	}
	unlock, err := e.takeWrites(ctx, pt)
	if err != nil {
		resp.Reason = fmt.Sprintf("%s: not written: the register's write turn is held by another write: %v", why, err)
		resp.Permission, resp.SideEffects = promcp.SourceUnreachable, []string{}
		e.log.Log(ctx, level, "safe state not applied", "tool", pt.tool, "value", value, "why", why, "err", err)
		return resp, fmt.Errorf("safe value %v not written: the register's write turn is held by another write: %w", value, err)
	}
	defer unlock()
	if ended != nil && ended() {
		e.log.Info("safe state not applied: a do_* call came meanwhile", "tool", pt.tool, "why", why)
		return resp, errSafeEnded
	}
	prev, perr := e.readFresh(ctx, pt)
	if perr == nil {
		resp.PreviousValue = prev.value
	}
	sent, deadline := e.now(), time.Now().Add(pt.c.Timeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The write goes around the circuit breaker on purpose: an actuator must be
	// tried whenever it is to be made safe, even if its device failed recently.
	werr := e.timed(ctx, pt, opWrite, func(ctx context.Context) error { return pt.drv.Write(ctx, value) })
	changed := perr != nil || !sameValue(pt, prev.value, value)
	// A write that may have changed the device is charged and numbered, so an
	// older in-doubt key retried later is superseded rather than undoing it.
	if werr == nil && changed || werr != nil && inDoubt(werr) {
		if err := e.charge(pt, Write{At: sent, Value: value, Seq: pt.site.nextSeq()}); err != nil {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("the write history could not be recorded: %v", err))
		}
	}
	if werr != nil {
		resp.Reason = fmt.Sprintf("%s: write failed: %v", why, werr)
		if until, ok := e.safeLate(ctx, pt, value, why, sent, deadline, werr, min(level, slog.LevelWarn)); ok {
			resp.Reason += fmt.Sprintf("; the device may still apply it until %s, and other writes to this register or line are refused until then", promcp.Time(until))
		}
		resp.Permission = failurePermission(werr)
		e.log.Log(ctx, level, "safe state not applied", "tool", pt.tool, "value", value, "why", why, "err", werr)
		return resp, fmt.Errorf("write safe value %v: %w", value, werr)
	}
	if !changed {
		e.invalidate(pt)
	}
	resp.Status, resp.AppliedValue = promcp.StatusSuccess, value
	if back, err := e.readFresh(ctx, pt); err != nil {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("written, but the read-back failed: %v", err))
	} else if resp.AppliedValue = back.value; !sameValue(pt, back.value, value) {
		resp.Status = promcp.StatusPartial
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("wrote %v but the device reports %v", value, back.value))
	}
	resp.Timestamp = promcp.Time(e.now())
	e.log.Info("safe state applied", "tool", pt.tool, "why", why, "previous", resp.PreviousValue, "applied", resp.AppliedValue, "changed", changed)
	if resp.Status != promcp.StatusSuccess {
		return resp, fmt.Errorf("wrote safe value %v but the device reports %v", value, resp.AppliedValue)
	}
	return resp, nil
}

// safeLate opens the settle window of the safe state's write of value (sent
// at sent, with deadline) that failed with werr, when its outcome is in
// doubt, as a do_*'s write opens one (lateWindow), and says until when (ok
// false: none, or the bus has none). A do_* written inside it could be
// undone when the frame lands: the dead man's safe write lost on the wire,
// an agent's write read back, then the device moving to the safe value
// behind the agent's back. The window is held in memory only: the write has
// no intent record for a restart to find. It is logged at level.
func (e *Engine) safeLate(ctx context.Context, pt *point, value any, by string, sent, deadline time.Time, werr error, level slog.Level) (until time.Time, ok bool) {
	window, why, acked := pt.late, whyLate, acknowledged(werr)
	if !inDoubt(werr) {
		return time.Time{}, false
	}
	if acked {
		window, why = max(pt.late, pt.ack), whyAck
	}
	if window <= 0 {
		return time.Time{}, false
	}
	until = e.now().Add(window)
	if !acked && ctx.Err() != nil {
		// the call went away: the bus may have held the frame until the deadline
		until = until.Add(max(time.Until(deadline), 0))
	}
	var reply *drivers.LateReply
	errors.As(werr, &reply)
	pt.site.noteLate(lateWrite{by: by, sent: sent, value: value, until: until, why: why, reply: reply})
	e.log.Log(ctx, level, "safe state write outcome unknown: its register is held for its settle window", "tool", pt.tool, "value", value, "late_until", until, "err", werr)
	return until, true
}

// DeadManTimeout is the manifest's safe_state.dead_man_timeout_ms (0: none).
func (e *Engine) DeadManTimeout() time.Duration { return e.m.SafeState.DeadManTimeout() }

// The dead man tries the points its safe state did not make safe again,
// deadRetryFirst after the first attempt, doubling up to deadRetryMax.
const (
	deadRetryFirst = time.Second
	deadRetryMax   = time.Minute
)

// touch notes a do_* call: the agent in charge is alive, re-arming the dead
// man and ending its retries.
func (e *Engine) touch() {
	e.deadMu.Lock()
	defer e.deadMu.Unlock()
	if len(e.deadUnsafe) > 0 {
		e.log.Info("a do_* call re-armed the dead man: its safe state is no longer retried", "not_made_safe", e.deadUnsafe)
	}
	e.lastDo, e.deadTripped, e.deadUnsafe = e.now(), false, nil
}

// CheckDeadMan applies the safe state when no do_* call has come for the
// dead-man timeout since the last call (or since the engine started). It
// fires once per silence: the next do_* call re-arms it. The points it could
// not make safe (a write failed, or its register's write turn is held by a
// wedged write) are tried again while the silence lasts, deadRetryFirst
// after the attempt and then twice as long each time up to deadRetryMax,
// until they are made safe. The caller runs it periodically; fired reports
// whether it acted. err is the first attempt's failures: a retry's are
// logged when the points not made safe change, not at every attempt.
func (e *Engine) CheckDeadMan(ctx context.Context) (fired bool, err error) {
	timeout := e.DeadManTimeout()
	if timeout <= 0 {
		return false, nil
	}
	e.deadMu.Lock()
	now, since := e.now(), e.lastDo
	silent := now.Sub(since)
	first := !e.deadTripped && silent >= timeout
	retry := e.deadTripped && len(e.deadUnsafe) > 0 && !now.Before(e.deadRetry)
	if first {
		e.deadTripped = true
	}
	before := e.deadUnsafe
	e.deadMu.Unlock()
	why := fmt.Sprintf("dead-man timeout: no do_* call for %s", timeout)
	// a do_* call re-arms the dead man before it takes its write turn
	rearmed := func() bool {
		e.deadMu.Lock()
		defer e.deadMu.Unlock()
		return e.lastDo != since
	}
	var unsafe []string
	switch {
	case first:
		e.log.Warn("no do_* call within the dead-man timeout: applying the safe state", "timeout", timeout, "silent_for", silent)
		unsafe, err = e.applySafeState(ctx, why, func(*point) bool { return true }, rearmed, slog.LevelError)
	case retry:
		unsafe, _ = e.applySafeState(ctx, why, func(pt *point) bool { return slices.Contains(before, pt.tool) }, rearmed, slog.LevelDebug)
	default:
		return false, nil
	}
	e.deadMu.Lock()
	defer e.deadMu.Unlock()
	if e.lastDo != since {
		return true, err // a do_* call re-armed it meanwhile
	}
	if retry {
		e.deadBackoff = min(2*e.deadBackoff, deadRetryMax)
	} else {
		e.deadBackoff = deadRetryFirst
	}
	e.deadUnsafe, e.deadRetry = unsafe, e.now().Add(e.deadBackoff)
	switch {
	case len(unsafe) == 0 && retry:
		e.log.Info("dead-man safe state complete", "made_safe", before)
	case first && len(unsafe) > 0:
		e.log.Warn("dead-man safe state incomplete: trying the points not made safe again while no do_* call comes", "not_made_safe", unsafe, "retry_in", e.deadBackoff)
	case retry && !slices.Equal(unsafe, before):
		e.log.Warn("dead-man safe state still incomplete", "not_made_safe", unsafe, "retry_in", e.deadBackoff)
	}
	return true, err
}
