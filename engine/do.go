package engine

import (
	"cmp"
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
	Tool  string
	Value any
	// PreviousValue is what the device holds now, read for this request (not
	// from the cache); nil when it could not be read, and PreviousError says why.
	PreviousValue any
	PreviousError string
	Unit          string
	SideEffects   []string
}

// Approval is a person's answer to an ApprovalRequest.
type Approval struct {
	Approved bool
	// Previous is the value the person was shown as the one the write
	// replaces (nil: none could be shown). The engine writes only if the
	// device still holds it (within the capability's resolution) when the
	// write's turn comes; otherwise the call is refused with
	// requires_human_approval, the only reason an approved call gets that
	// permission, and the person can be asked again with the new value.
	Previous any
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
	return e.do(ctx, caller, pt, req, nil), nil
}

// do is Do for a point, on behalf of the operation by (nil for a do_* call):
// an operation's writes are ordinary writes, except that they may write the
// point it drives, and do not re-arm the dead man (an agent that went away
// while a ramp runs must still be caught).
func (e *Engine) do(ctx context.Context, caller Caller, pt *point, req promcp.DoRequest, by *runningOp) (resp promcp.DoResponse) {
	tool := pt.tool
	outcome, at, began := "", e.now(), time.Now()
	defer func() {
		took := time.Since(began)
		pt.counts.doAnswered(resp, outcome)
		e.callLatency[verbDo].observe(took)
		e.auditDo(caller, pt, req, resp, outcome, at, took)
	}()
	key := req.IdempotencyKey
	if key == "" {
		key = promcp.NewUUID()
	}
	value, perm, verr := validate(pt.c, req.Value)
	if verr != nil {
		return e.refuse(pt, key, perm, verr.Error())
	}
	if why := e.ops.excludes(pt, key, by); why != "" {
		return e.refuse(pt, key, promcp.PolicyDenied, why)
	}

	fp := fingerprint(tool, value)
	release, err := e.claim(ctx, key, fp, pt.c.Timeout())
	if err != nil {
		resp, outcome = e.stillRunning(pt, key, fp, err)
		return resp
	}
	defer release()
	var doubt *Record // this key's earlier write, sent with no known outcome
	if rec, ok := e.idem.Load(key); ok {
		switch {
		case rec.Forgotten:
			return e.refuse(pt, key, "", fmt.Sprintf("idempotency_key %q was used before, and this server no longer holds its outcome "+
				"(without a state directory it keeps the outcomes of its last %d do_* calls); it may have been applied, so nothing was written: "+
				"read the current value, and use a new key to act again", key, DefaultMemoryRecords))
		case rec.Fingerprint != fp:
			return e.refuse(pt, key, "", fmt.Sprintf("idempotency_key %q was already used for a different request; use a new key for a new action", key))
		case rec.InDoubt:
			l, _ := pt.site.lateOf(key)
			if l.until.After(rec.LateUntil) {
				rec.LateUntil = l.until // a window widened in memory only: its record could not be saved
			}
			proved, err := e.waitLate(ctx, rec.LateUntil, l.reply)
			if err != nil {
				outcome = OutcomeInDoubt
				return e.stillLate(pt, key, rec, l.why, err)
			}
			pt.site.endLate(key)
			if resp, outcome = e.settleLocked(ctx, pt, key, rec, proved); outcome != "" {
				return resp
			}
			doubt = &rec
		case !rec.retryable():
			e.log.Info("do replayed", "tool", tool, "key", key)
			outcome = OutcomeReplayed
			return rec.Response
		}
	}

	d := e.evaluate(pt, caller, value)
	if d.permission == promcp.RequiresHumanApproval {
		d = e.askApproval(ctx, pt, caller, d)
	}
	if d.permission != promcp.Allowed {
		e.log.Info("do refused", "tool", tool, "key", key, "permission", d.permission, "reason", d.reason, "caller", caller.Identity)
		return e.refuse(pt, key, d.permission, d.reason)
	}
	q := e.confirmQuorum(ctx, pt, d.value)
	if q.permission != promcp.Allowed {
		e.log.Info("do refused: no quorum", "tool", tool, "key", key, "reason", q.reason, "caller", caller.Identity)
		return e.refuse(pt, key, q.permission, q.reason)
	}
	d.warnings = append(d.warnings, q.warnings...)
	// Writes to one register or line (and to the sources of its interlocks)
	// take turns from here to the charge, and check the limits again in turn:
	// another call may have written meanwhile.
	unlock, err := e.takeWrites(ctx, pt)
	if err != nil {
		e.log.Warn("do refused: no write turn", "tool", tool, "key", key, "err", err, "caller", caller.Identity)
		return e.refuse(pt, key, promcp.SourceUnreachable, fmt.Sprintf("%v; nothing was written", err))
	}
	defer unlock()
	if marks, ok := ctx.Value(safeMarksKey{}).(map[*site]uint64); ok && safeSince(marks) {
		// a sequence's step or undo that passed the sequence's look before
		// the safe state came: the safe state counts its drive before it
		// takes the turn, so one under way is seen here
		e.log.Info("do refused: the safe state came during its sequence", "tool", tool, "key", key, "caller", caller.Identity)
		return e.refuse(pt, key, "", safeCame+"; nothing was written")
	}
	if doubt != nil && doubt.Seq > 0 {
		// A write may have come between settling and taking the turn.
		if later, laterTool, ok := pt.site.after(doubt.Seq, e.overlapping(pt)); ok {
			outcome = OutcomeSuperseded
			return e.superseded(pt, key, *doubt, later, laterTool)
		}
	}
	if l := e.limits(pt); l.permission != promcp.Allowed {
		if doubt != nil {
			l.reason += "; the earlier attempt with this key was not applied (the device does not show its value), and writing it now counts as a new write"
		}
		return e.refuse(pt, key, l.permission, l.reason)
	}

	prev, err := e.readFresh(ctx, pt)
	if err != nil {
		return e.refuse(pt, key, failurePermission(err), fmt.Sprintf("could not read the current value, so nothing was written: %v", err))
	}
	if d.approvedPrevious != nil && !sameValue(pt, prev.value, d.approvedPrevious) {
		e.log.Info("do refused: the value moved since approval", "tool", tool, "key", key, "shown", d.approvedPrevious, "now", prev.value, "caller", caller.Identity)
		u := unitSuffix(pt.c)
		return e.refuse(pt, key, promcp.RequiresHumanApproval, fmt.Sprintf("the device value moved from %v%s to %v%s since the approval was shown; nothing was written", d.approvedPrevious, u, prev.value, u))
	}
	if il := e.interlocks(ctx, pt, d.value, true); il.permission != promcp.Allowed {
		e.log.Info("do refused by an interlock", "tool", tool, "key", key, "permission", il.permission, "reason", il.reason, "caller", caller.Identity)
		return e.refuse(pt, key, il.permission, il.reason)
	}
	resp, outcome = e.write(ctx, pt, Record{Fingerprint: fp, Tool: pt.tool, Caller: caller.Identity, Role: caller.Role}, key, d, prev.value)
	return resp
}

// write sends d.value to the device exactly once. The intent is recorded
// first, so a lost outcome is settled by a retry instead of written twice;
// the write is charged to the limits from the moment it leaves, whether it
// is then confirmed or its outcome is lost. base names the request (its
// fingerprint, tool and caller) in every record kept of it. The caller holds
// the write turn.
func (e *Engine) write(ctx context.Context, pt *point, base Record, key string, d decision, prev any) (promcp.DoResponse, string) {
	resp := e.response(pt, key)
	resp.PreviousValue = prev
	resp.AppliedValue = d.value
	resp.Warnings = d.warnings
	w := Write{At: e.now(), Value: d.value, Seq: pt.site.nextSeq(), Key: key}
	intent := base
	intent.Response, intent.At, intent.InDoubt, intent.Seq, intent.SentAt = resp, w.At, true, w.Seq, w.At
	if d.clamped {
		intent.Response.Status = promcp.StatusPartial // so that a write confirmed by read-back says so (settle)
	}
	wctx := ctx // the write's
	if bound := max(pt.late, pt.ack); bound > 0 {
		// The bus gives up on the frame by the write's deadline at the
		// latest, and the device may apply it until the window after (an
		// acknowledge's too, which comes by the deadline): the intent keeps
		// that bound, so a crash keeps the window too, one that comes before
		// an acknowledge's window is saved included.
		deadline := time.Now().Add(pt.c.Timeout())
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		intent.LateUntil = w.At.Add(time.Until(deadline) + bound)
	}
	if err := e.idem.Save(key, intent); err != nil {
		failed := e.refuse(pt, key, "", fmt.Sprintf("could not record the request, so nothing was written: %v", err))
		failed.PreviousValue = prev
		return failed, OutcomeFailed
	}

	// The key goes with the write: a point whose device is itself
	// idempotent by key (an adopted do_*) passes it on, so a retry after a
	// lost outcome cannot act twice there either.
	werr := e.transact(drivers.WithIdempotencyKey(wctx, key), pt, opWrite, func(ctx context.Context) error { return pt.drv.Write(ctx, d.value) })
	if werr != nil && !inDoubt(werr) {
		return e.notApplied(pt, base, key, d.value, prev, werr)
	}
	if werr != nil {
		retry := "the retry checks the device and never writes twice"
		var late *drivers.LateReply // the bus listens for the device's reply to the frame
		window, why, acked := pt.late, whyLate, acknowledged(werr)
		if acked {
			window, why = max(pt.late, pt.ack), whyAck
		}
		if window > 0 {
			errors.As(werr, &late)
			e.lateWindow(wctx, pt, key, &intent, window, why, acked, late)
			retry = fmt.Sprintf("the device may still apply it until %s (%s), so the retry waits until then, "+
				"then checks the device and never writes twice; other writes to this register are refused until then", promcp.Time(intent.LateUntil), why)
			if late != nil {
				retry += ", unless the device's late reply to the write proves it applied first: that settles the key at once"
			}
		} else if !intent.LateUntil.IsZero() {
			// no acknowledge came, and the bus has no late_write_ms: the
			// bound the intent kept for an acknowledge ends now (unsaved, it
			// stands: longer, never shorter than a restart would find)
			next := intent
			next.LateUntil = time.Time{}
			if e.idem.Save(key, next) == nil {
				intent = next
			}
		}
		chargeErr := e.charge(pt, w)
		if late != nil {
			e.awaitLateReply(pt, key, w.Seq, late)
		}
		e.log.Warn("do write outcome unknown", "tool", pt.tool, "key", key, "point", pt.drv.Describe(), "seq", w.Seq, "late_until", intent.LateUntil, "err", werr)
		resp.Permission = promcp.SourceUnreachable
		resp.AppliedValue = nil
		resp.Reason = fmt.Sprintf("the write of %v was sent but its outcome is unknown (%v): the device may have applied it. "+
			"Retry with the same idempotency_key: %s. "+
			"This write counts against the cooldown and rate limits.", d.value, werr, retry)
		if chargeErr != nil {
			resp.Warnings = append(resp.Warnings, chargeWarning(chargeErr))
		}
		return resp, OutcomeInDoubt
	}
	pt.clearRefusal()
	e.chargeInMemory(pt, w)
	return e.finish(ctx, pt, base, key, resp, d.value, d.clamped, &w), OutcomeApplied
}

// lateWindow starts the settle window of an in-doubt write: the device may
// still apply the frame for window (why) after the bus gave up on it, or
// after it acknowledged it (acked: exception 5, acted on later). While the
// caller is still there, the bus gave up when the write returned, so the
// intent's bound (from the deadline) is narrowed to that; a caller that
// went away may have left the frame on the bus until the deadline. An
// acknowledge came back, so the frame's travel is over; its window runs
// from then, narrowing the intent's bound or widening it (on a bus without
// late_write_ms the intent has none). Other writes to the site are refused
// until the window ends, or until the device's late reply proves the write
// applied when the bus listens for it (reply, else nil).
func (e *Engine) lateWindow(ctx context.Context, pt *point, key string, intent *Record, window time.Duration, why string, acked bool, reply *drivers.LateReply) {
	until := e.now().Add(window)
	if acked && !until.Equal(intent.LateUntil) || ctx.Err() == nil && until.Before(intent.LateUntil) {
		next := *intent
		next.LateUntil = until
		// Unsaved, a narrowed window keeps the intent's bound: the window is
		// never shorter in memory than a restart would find it. A widened
		// one stands in memory all the same (a retry waits for the longer).
		if err := e.idem.Save(key, next); err == nil || until.After(intent.LateUntil) {
			*intent = next
		}
	}
	pt.site.noteLate(lateWrite{key: key, value: intent.Response.AppliedValue, until: intent.LateUntil, why: why, reply: reply})
}

// awaitLateReply settles key when the bus hears the device's late reply to
// its write (numbered seq) and it proves the write applied: the window ends
// at once (other writes to the register are allowed again), and the outcome
// is recorded as a retry records a write it finds applied, so the next
// retry replays it. Any other end of listening proves nothing: the window
// stands. A retry holding the key meanwhile settles it itself.
func (e *Engine) awaitLateReply(pt *point, key string, seq uint64, late *drivers.LateReply) {
	e.lateReplies.Go(func() {
		<-late.Done()
		if !late.Applied() {
			return
		}
		rec, ok := e.idem.Load(key)
		if !ok || !rec.InDoubt || rec.Seq != seq {
			return // settled meanwhile
		}
		ctx, cancel := context.WithTimeout(context.Background(), pt.late+pt.c.Timeout())
		defer cancel()
		// the key's request, so a retry of it that finds the key held here
		// is answered as the same request
		release, err := e.claim(ctx, key, rec.Fingerprint, 0)
		if err != nil {
			return
		}
		defer release()
		rec, ok = e.idem.Load(key)
		if !ok || !rec.InDoubt || rec.Seq != seq {
			return // settled meanwhile
		}
		pt.site.endLate(key)
		at, began := e.now(), time.Now()
		if resp, outcome := e.settleLocked(ctx, pt, key, rec, true); outcome == OutcomeConfirmed {
			e.auditDo(Caller{Identity: "physmcpd"}, pt, promcp.DoRequest{Value: rec.Response.AppliedValue, IdempotencyKey: key}, resp, outcome, at, time.Since(began))
		}
	})
}

// waitLate waits until the settle window that ends at until is over (zero:
// none): before then the device may still apply an in-doubt frame, so a
// read-back proves nothing. It waits on the real clock, for as long as the
// engine's clock says is left, and gives up when the call is cancelled
// while it waits. While the bus listens for the device's late reply to the
// frame (reply), it waits for that too, up to the call's deadline, and ends
// when the reply proves the frame applied (proved); otherwise it gives up at
// once when the deadline comes before the window's end.
func (e *Engine) waitLate(ctx context.Context, until time.Time, reply *drivers.LateReply) (proved bool, err error) {
	var heard <-chan struct{}
	if reply != nil {
		heard = reply.Done()
	}
	for {
		if reply.Applied() {
			return true, nil
		}
		left := until.Sub(e.now())
		if left <= 0 {
			return false, nil
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < left && heard == nil {
			return false, fmt.Errorf("the call's deadline comes %s before the window ends", (left - time.Until(d)).Round(time.Millisecond))
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			return false, nil
		case <-heard:
			heard = nil // listening is over: proved, or never will be
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
		t.Stop()
	}
}

// stillLate answers a retry of an in-doubt key that could not wait for the
// end of its settle window (open for window, as lateWrite.why says; "" when
// unknown) for why: nothing is written and the key stays in doubt, as the
// first answer said.
func (e *Engine) stillLate(pt *point, key string, rec Record, window string, why error) promcp.DoResponse {
	resp := e.response(pt, key)
	resp.Permission = promcp.SourceUnreachable
	resp.PreviousValue = rec.Response.PreviousValue
	resp.Reason = fmt.Sprintf("this key's write of %v (sent %s) has no known outcome, and the device may still apply it until %s (%s); "+
		"checking before then proves nothing, and this call could not wait (%v). Nothing was written. "+
		"Retry with the same idempotency_key after %s: the retry checks the device and never writes twice",
		rec.Response.AppliedValue, promcp.Time(rec.SentAt), promcp.Time(rec.LateUntil), cmp.Or(window, whyRestored), why, promcp.Time(rec.LateUntil))
	e.log.Info("do in-doubt key retried inside its settle window", "tool", pt.tool, "key", key, "late_until", rec.LateUntil, "why", why)
	return resp
}

// stillRunning answers a call that gave up waiting (busy) for another call
// with its key (keyBusyAnswer). For the same request it says when a retry
// can expect that call's outcome: once the key's write, when one is under
// way, has had its timeout and settle window, else once a write would have
// had its timeout.
func (e *Engine) stillRunning(pt *point, key, fp string, busy error) (promcp.DoResponse, string) {
	resp := e.response(pt, key)
	retry, sent := e.now().Add(pt.c.Timeout()), ""
	rec, inDoubt := e.idem.Load(key)
	if inDoubt = inDoubt && rec.InDoubt; inDoubt {
		if rec.LateUntil.After(retry) {
			retry = rec.LateUntil
		}
		sent = fmt.Sprintf("; this key's write of %v left at %s and has no known outcome yet", rec.Response.AppliedValue, promcp.Time(rec.SentAt))
	}
	perm, reason, outcome := keyBusyAnswer(busy, key, fp, sent, retry)
	if outcome == "" {
		return e.refuse(pt, key, perm, reason), outcome
	}
	if inDoubt {
		resp.PreviousValue = rec.Response.PreviousValue
	}
	resp.Permission, resp.Reason = perm, reason
	e.log.Info("do key busy: the caller could not wait for the call with its key", "tool", pt.tool, "key", key, "why", busy)
	return resp, outcome
}

func chargeWarning(err error) string {
	return fmt.Sprintf("the write could not be recorded for the cooldown and rate limits (%v): a restart may allow the next write early", err)
}

func outcomeWarning(err error) string {
	return fmt.Sprintf("the outcome could not be recorded (%v): a retry with this key may act again", err)
}

// inDoubt says whether a failed write may nevertheless have been applied:
// the transport says so, or the deadline passed or the driver panicked with
// the write possibly under way, unless the transport says it never started.
func inDoubt(err error) bool {
	if errors.Is(err, drivers.ErrInDoubt) {
		return true
	}
	return !errors.Is(err, drivers.ErrNotSent) && (errors.Is(err, drivers.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDriverPanic))
}

// acknowledged says the device answered the write with exception 5
// (acknowledge): it accepted it and acts on it later.
func acknowledged(err error) bool {
	var ex *drivers.ModbusException
	return errors.As(err, &ex) && ex.Code == 5
}

// notApplied answers a write that certainly changed nothing: the device
// refused it, or it never left. The outcome is recorded, so the in-doubt
// intent does not outlive it, as a failure that a retry with the key may try
// again (it is not replayed).
func (e *Engine) notApplied(pt *point, base Record, key string, value, prev any, werr error) (promcp.DoResponse, string) {
	perm, outcome := failurePermission(werr), OutcomeFailed
	reason := fmt.Sprintf("write failed, nothing was applied: %v", werr)
	if perm == promcp.DeviceRejected {
		outcome = OutcomeRejected
		reason = fmt.Sprintf("the device refused the write, nothing was applied: %v. Retrying the same request will not help; check the value and the binding (address, unit, data type)", werr)
		pt.noteRefusal(value, werr)
		e.log.Warn("do refused by the device", "tool", pt.tool, "key", key, "point", pt.drv.Describe(), "value", value, "err", werr)
	} else {
		e.log.Warn("do write failed", "tool", pt.tool, "key", key, "point", pt.drv.Describe(), "err", werr)
	}
	failed := e.refuse(pt, key, perm, reason)
	failed.PreviousValue = prev
	if err := e.idem.Save(key, base.final(failed, e.now())); err != nil {
		failed.Warnings = append(failed.Warnings, fmt.Sprintf("the failure could not be recorded (%v): a retry with this key reads the device first", err))
	}
	return failed, outcome
}

// finish reads the point back after a write, completes and records the
// response, with the write's charge when it is held in memory only so far.
func (e *Engine) finish(ctx context.Context, pt *point, base Record, key string, resp promcp.DoResponse, written any, clamped bool, charged *Write) promcp.DoResponse {
	resp.Status = promcp.StatusSuccess
	resp.Permission, resp.Reason = "", ""
	if clamped {
		resp.Status = promcp.StatusPartial
	}
	back, err := e.readFresh(ctx, pt)
	shown := false
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
		shown = true
	}
	e.compensation(pt, &resp)
	resp.Timestamp = promcp.Time(e.now())
	// A failure to record is told to this caller; the stored answer cannot say it.
	resp.Warnings = append(resp.Warnings, e.saveOutcome(pt, key, base.final(resp, e.now()), charged, shown)...)
	e.log.Info("do applied", "tool", pt.tool, "key", key, "status", resp.Status, "previous", resp.PreviousValue, "applied", resp.AppliedValue)
	return resp
}

// settleLocked settles an in-doubt key under its site's write turn.
func (e *Engine) settleLocked(ctx context.Context, pt *point, key string, rec Record, proved bool) (promcp.DoResponse, string) {
	unlock, err := e.takeWrites(ctx, pt)
	if err != nil {
		e.log.Warn("do in-doubt key not settled: no write turn", "tool", pt.tool, "key", key, "err", err)
		return e.refuse(pt, key, promcp.SourceUnreachable, fmt.Sprintf("this key's write of %v (sent %s) has no known outcome, and checking it needs the write turn: %v. "+
			"Nothing was written; retry with the same idempotency_key: the retry checks the device and never writes twice", rec.Response.AppliedValue, promcp.Time(rec.SentAt), err)), OutcomeInDoubt
	}
	defer unlock()
	return e.settle(ctx, pt, key, rec, proved)
}

// settle decides what became of an in-doubt key's write, writing nothing:
//   - a later write to the same register or line was made since: superseded
//     (its own outcome no longer matters: the device holds the later value);
//   - else the device's late reply proved it applied (proved), or the
//     device shows the requested value: it was applied, and is recorded as
//     done;
//   - else it was not applied: outcome "" and the call may write it now.
//
// The caller holds the site's write turn.
func (e *Engine) settle(ctx context.Context, pt *point, key string, rec Record, proved bool) (promcp.DoResponse, string) {
	if later, laterTool, ok := pt.site.after(rec.Seq, e.overlapping(pt)); ok && rec.Seq > 0 {
		return e.superseded(pt, key, rec, later, laterTool), OutcomeSuperseded
	}
	want := rec.Response.AppliedValue
	if !proved {
		cur, err := e.readFresh(ctx, pt)
		if err != nil {
			failed := e.refuse(pt, key, failurePermission(err), fmt.Sprintf("an earlier call with this key may have written; the device cannot be read to check, so nothing was written: %v", err))
			failed.PreviousValue = rec.Response.PreviousValue
			return failed, OutcomeFailed
		}
		if !sameValue(pt, cur.value, want) {
			return promcp.DoResponse{}, ""
		}
	}
	var charged *Write
	if rec.Seq == 0 || !pt.site.charged(rec.Seq) {
		// A record from before writes were numbered, or a crash between
		// sending and charging: charge it now, from when it was sent.
		sent := rec.SentAt
		if sent.IsZero() {
			sent = rec.At
		}
		charged = &Write{At: sent, Value: want, Seq: rec.Seq, Key: key}
		e.chargeInMemory(pt, *charged)
	}
	e.log.Info("do in-doubt write confirmed", "tool", pt.tool, "key", key, "by_late_reply", proved)
	return e.finish(ctx, pt, rec, key, rec.Response, want, rec.Response.Status == promcp.StatusPartial, charged), OutcomeConfirmed
}

// superseded answers a retry of an in-doubt key after a later write: writing
// its value now would undo that write, so nothing is written.
func (e *Engine) superseded(pt *point, key string, rec Record, later Write, laterTool string) promcp.DoResponse {
	by := fmt.Sprintf("%s with idempotency_key %q", laterTool, later.Key)
	if later.Key == "" {
		by = "the safe state"
	}
	resp := e.refuse(pt, key, promcp.Superseded, fmt.Sprintf(
		"this key's write of %v (sent %s) had no known outcome, and a later write to the same register or line has been made since: %v by %s at %s. "+
			"Writing %v now would undo it, so nothing was written; read the current value, and use a new idempotency_key to ask for %v again",
		rec.Response.AppliedValue, promcp.Time(rec.SentAt), later.Value, by, promcp.Time(later.At), rec.Response.AppliedValue, rec.Response.AppliedValue))
	resp.PreviousValue = rec.Response.PreviousValue
	e.log.Info("do in-doubt key superseded", "tool", pt.tool, "key", key, "later_key", later.Key, "later_seq", later.Seq, "seq", rec.Seq)
	return resp
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
	req := ApprovalRequest{Tool: pt.tool, Value: d.value, Unit: pt.c.Unit, SideEffects: pt.c.SideEffects}
	// The person decides on what the device holds now: a cached reading may
	// predate a change made by another client or by hand.
	if r, err := e.readFresh(ctx, pt); err != nil {
		req.PreviousError = err.Error()
	} else {
		req.PreviousValue = r.value
	}
	a, err := caller.Approve(ctx, req)
	switch {
	case err != nil:
		d.reason = fmt.Sprintf("approval could not be obtained (%v); nothing was written", err)
	case !a.Approved:
		d.reason = "a person declined the action; nothing was written"
	default:
		d.permission, d.reason = promcp.Allowed, ""
		d.approvedPrevious = a.Previous
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

// refuse is a failed response for a call that wrote nothing: it has no side
// effects (an in-doubt answer, which may have acted, keeps the declared ones).
func (e *Engine) refuse(pt *point, key string, perm promcp.Permission, reason string) promcp.DoResponse {
	resp := e.response(pt, key)
	resp.SideEffects = []string{}
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
	if enc, ok := pt.encoding(); ok {
		tol = max(tol, enc.Step/2)
	}
	return math.Abs(g-w) <= tol
}
