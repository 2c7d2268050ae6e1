package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// WriteHistory is what a point's cooldown and rate limits count, as a
// LimitStore keeps it across restarts.
type WriteHistory struct {
	// Writes are the writes inside the longest window that can still count, oldest first.
	Writes []time.Time
	// Last is the latest write; the cooldown runs from it.
	Last time.Time
	// LastValue is the value that write left on the device.
	LastValue any
	// Seq numbers the writes to the point (the latest one's number), and Key
	// is the latest write's idempotency key ("" for the safe state), so a
	// retry of an older in-doubt key knows it was superseded, across restarts.
	Seq uint64
	Key string
}

// Write is one write charged to a point: it left for the device at At (its
// outcome may be unknown) with number Seq, asked for by Key.
type Write struct {
	At    time.Time
	Value any
	Seq   uint64
	Key   string
}

// LimitStore keeps the write history of every do point, so a restart does not
// reset a cooldown or a rate window. The Full profile persists it; nil keeps
// it in memory only.
type LimitStore interface {
	// LoadWrites returns the history of every point that has one, by tool name.
	LoadWrites() (map[string]WriteHistory, error)
	// RecordWrite durably adds w to tool's history, forgetting writes older
	// than keep before w.At (the latest is always kept).
	RecordWrite(tool string, w Write, keep time.Duration) error
}

// OutcomeStore is implemented by a store that keeps both the idempotency
// records and the write history (the Full profile's): a write's outcome and
// its charge then become durable in one commit instead of two.
type OutcomeStore interface {
	// SaveOutcome is Save(key, r) and, when w is not nil, RecordWrite(tool,
	// *w, keep) at once. With shown, the device showed r's value when read
	// back after the write: the store may then return once the change is
	// written where a crash of the process keeps it, before it is durable
	// against one of the machine (see finish).
	SaveOutcome(key string, r Record, tool string, w *Write, keep time.Duration, shown bool) error
}

// InDoubtLister is implemented by idempotency stores that can list the keys
// whose write outcome is unknown, so the engine can settle them at start-up
// before the safe state overwrites the evidence on the device.
type InDoubtLister interface {
	InDoubt() (map[string]Record, error)
}

// AuditEntry is one do_* attempt (or safe-state write) as the audit trail
// records it. The engine hands entries to Options.Audit and does no I/O itself.
type AuditEntry struct {
	Time       time.Time         `json:"time"`
	Caller     string            `json:"caller"`
	Role       manifest.Role     `json:"role,omitempty"`
	Tool       string            `json:"tool"`
	Arguments  map[string]any    `json:"arguments"`
	Key        string            `json:"idempotency_key,omitempty"`
	Status     promcp.Status     `json:"status"`
	Permission promcp.Permission `json:"permission,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	// Outcome says how the answer came about: applied, refused (by the
	// policy), rejected (by the device), failed (nothing applied), in_doubt
	// (sent, outcome unknown), replayed (a stored answer for a repeated key),
	// confirmed (an in-doubt write found on the device), superseded (an
	// in-doubt key retried after a later write), key_busy (gave up waiting
	// for another call with its key; nothing sent) or safe_state.
	Outcome  string   `json:"outcome"`
	Previous any      `json:"previous_value"`
	Applied  any      `json:"applied_value"`
	Warnings []string `json:"warnings,omitempty"`
	// Quality is a read_* answer's quality (audited with defaults.audit_all).
	Quality    string  `json:"quality,omitempty"`
	DurationMs float64 `json:"duration_ms"`
}

// Audit outcomes.
const (
	OutcomeApplied   = "applied"
	OutcomeRefused   = "refused"
	OutcomeFailed    = "failed"
	OutcomeReplayed  = "replayed"
	OutcomeConfirmed = "confirmed"
	OutcomeSafeState = "safe_state"
	// OutcomeInDoubt: the write left but no reply confirmed or refused it.
	OutcomeInDoubt = "in_doubt"
	// OutcomeRejected: the device answered and refused the write.
	OutcomeRejected = "rejected"
	// OutcomeSuperseded: a retried in-doubt key found a later write; nothing written.
	OutcomeSuperseded = "superseded"
	// OutcomeKeyBusy: the call gave up waiting for another call with its
	// idempotency key, still running; it sent nothing (answered
	// source_unreachable: a retry gets that call's outcome).
	OutcomeKeyBusy = "key_busy"
)

// restoreLimits loads the persisted write history into the points.
func (e *Engine) restoreLimits() error {
	if e.history == nil {
		return nil
	}
	hist, err := e.history.LoadWrites()
	if err != nil {
		return fmt.Errorf("load the write history (cooldowns, rate limits): %w", err)
	}
	for tool, h := range hist {
		pt, ok := e.catalog().points[tool]
		if !ok || pt.c.Kind != manifest.KindDo {
			e.log.Warn("write history of a tool the manifest no longer has; ignored", "tool", tool)
			continue
		}
		pt.writes = append([]time.Time(nil), h.Writes...)
		pt.lastWrite = h.Last
		pt.site.note(tool, Write{At: h.Last, Value: h.LastValue, Seq: h.Seq, Key: h.Key})
		e.log.Info("write history restored", "tool", tool, "last_write", h.Last, "last_value", h.LastValue, "writes_in_window", len(h.Writes), "seq", h.Seq)
	}
	return nil
}

// inDoubt lists the store's in-doubt writes by key; a store that cannot list
// keys (the in-memory one) has none that outlived a restart.
func (e *Engine) inDoubt() (map[string]Record, error) {
	lister, ok := e.idem.(InDoubtLister)
	if !ok {
		return nil, nil
	}
	recs, err := lister.InDoubt()
	if err != nil {
		return nil, fmt.Errorf("list in-doubt writes: %w", err)
	}
	return recs, nil
}

// restoreLate restores the settle windows of in-doubt writes that have not
// ended yet, so a restart does not free their registers early.
func (e *Engine) restoreLate() error {
	recs, err := e.inDoubt()
	if err != nil {
		return err
	}
	now := e.now()
	for key, rec := range recs {
		pt, ok := e.catalog().points[rec.Tool]
		if !ok || !rec.LateUntil.After(now) {
			continue
		}
		pt.site.noteLate(lateWrite{key: key, value: rec.Response.AppliedValue, until: rec.LateUntil, why: whyRestored})
		e.log.Info("in-doubt write may still reach the device", "tool", rec.Tool, "key", key, "late_until", rec.LateUntil)
	}
	return nil
}

// charge counts w, a write that left for the device at w.At (applied or in
// doubt), against the point's cooldown and rate limits and numbers it on its
// site, in memory and in the LimitStore.
func (e *Engine) charge(pt *point, w Write) error {
	e.chargeInMemory(pt, w)
	if e.history == nil {
		return nil
	}
	if err := e.history.RecordWrite(pt.tool, w, e.keepWrites(pt)); err != nil {
		e.log.Error("write history not recorded: a restart may forget this write's cooldown and rate limit", "tool", pt.tool, "err", err)
		return err
	}
	return nil
}

// chargeInMemory is charge without the LimitStore: for a write whose charge
// is made durable with its outcome (saveOutcome). Until then the in-doubt
// intent stands for it: a restart charges an intent the history lacks.
func (e *Engine) chargeInMemory(pt *point, w Write) {
	longest := e.longestRate(pt)
	pt.mu.Lock()
	if w.At.After(pt.lastWrite) {
		pt.lastWrite = w.At
	}
	pt.writes = append(pt.writes, w.At)
	// keep the slice ordered: a write charged at start-up may be older than the last
	for i := len(pt.writes) - 1; i > 0 && pt.writes[i].Before(pt.writes[i-1]); i-- {
		pt.writes[i], pt.writes[i-1] = pt.writes[i-1], pt.writes[i]
	}
	// Forget writes older than the longest window; they can no longer count.
	now := e.now()
	cut := 0
	for cut < len(pt.writes)-1 && now.Sub(pt.writes[cut]) > longest {
		cut++
	}
	pt.writes = append(pt.writes[:0], pt.writes[cut:]...)
	pt.mu.Unlock()
	pt.site.note(pt.tool, w)
	e.invalidate(pt)
}

// keepWrites is how long the LimitStore keeps a point's writes.
func (e *Engine) keepWrites(pt *point) time.Duration {
	return max(e.longestRate(pt), pt.c.Cooldown())
}

// saveOutcome records a do_*'s final record and, when charged is not nil,
// the charge held in memory only so far: in one commit where the store can.
// shown says the read-back showed the written value (see finish).
func (e *Engine) saveOutcome(pt *point, key string, rec Record, charged *Write, shown bool) []string {
	if both, ok := e.idem.(OutcomeStore); ok && (charged == nil || any(e.history) == any(e.idem)) {
		if err := both.SaveOutcome(key, rec, pt.tool, charged, e.keepWrites(pt), shown); err != nil {
			e.log.Error("outcome not recorded", "tool", pt.tool, "key", key, "err", err)
			if charged != nil {
				return []string{outcomeWarning(err), chargeWarning(err)}
			}
			return []string{outcomeWarning(err)}
		}
		return nil
	}
	var warnings []string
	if charged != nil && e.history != nil {
		if err := e.history.RecordWrite(pt.tool, *charged, e.keepWrites(pt)); err != nil {
			warnings = append(warnings, chargeWarning(err))
		}
	}
	if err := e.idem.Save(key, rec); err != nil {
		warnings = append(warnings, outcomeWarning(err))
	}
	return warnings
}

// audit hands an entry to Options.Audit, when set.
func (e *Engine) audit(a AuditEntry) {
	if e.auditFn != nil {
		e.auditFn(a)
	}
}

// auditDo records one do_* call's answer.
// at is the engine clock's time of the call; took is measured on the real clock.
func (e *Engine) auditDo(caller Caller, pt *point, req promcp.DoRequest, resp promcp.DoResponse, outcome string, at time.Time, took time.Duration) {
	if e.auditFn == nil {
		return
	}
	if outcome == "" {
		outcome = OutcomeApplied
		if resp.Status == promcp.StatusFailed {
			outcome = failedOutcome(resp.Permission)
		}
	}
	e.audit(AuditEntry{
		Time:       at,
		Caller:     caller.Identity,
		Role:       caller.Role,
		Tool:       pt.tool,
		Arguments:  map[string]any{"value": req.Value, "idempotency_key": req.IdempotencyKey},
		Key:        resp.IdempotencyKey,
		Status:     resp.Status,
		Permission: resp.Permission,
		Reason:     resp.Reason,
		Outcome:    outcome,
		Previous:   resp.PreviousValue,
		Applied:    resp.AppliedValue,
		Warnings:   resp.Warnings,
		DurationMs: float64(took.Microseconds()) / 1000,
	})
}

// failedOutcome is the outcome of a call answered failed with permission p:
// refused by a check, or failed (nothing applied) without a permission or
// with the source unreachable.
func failedOutcome(p promcp.Permission) string {
	if p == "" || p == promcp.SourceUnreachable {
		return OutcomeFailed
	}
	return OutcomeRefused
}

// auditRefusedOp records a call of an operation's acting tool (start_*,
// do_cancel_*, a sequence's do_*) refused before it acted, with the
// arguments it was given and the key it was answered under, as a refused
// do_* is recorded: under outcome, or ("") the one its permission p gives.
func (e *Engine) auditRefusedOp(caller Caller, tool string, args map[string]any, key string, p promcp.Permission, reason, outcome string) {
	if e.auditFn == nil {
		return
	}
	if outcome == "" {
		outcome = failedOutcome(p)
	}
	e.audit(AuditEntry{
		Time: e.now(), Caller: caller.Identity, Role: caller.Role, Tool: tool, Arguments: args, Key: key,
		Status: promcp.StatusFailed, Permission: p, Reason: reason, Outcome: outcome,
	})
}

// SettleInDoubt settles every idempotency key whose write outcome was lost
// (a crash or a lost reply between sending and recording the outcome). A
// write that left before a crash and was never charged is charged now, from
// when it was sent (a crash must not reset a cooldown). Then each key is
// settled as a retry would (settle), once its settle window has ended
// (waiting for it within ctx): applied keys are recorded as done without
// writing again; superseded and unapplied keys stay in doubt, and a retry
// answers them. It runs before the safe state at start-up, which would
// otherwise overwrite the evidence. Stores that cannot list keys (the
// in-memory one) have nothing to settle after a restart.
func (e *Engine) SettleInDoubt(ctx context.Context) error {
	return e.settleInDoubt(ctx, func(*point) bool { return true })
}

// settleInDoubt is SettleInDoubt for the keys of the do points on selects:
// the safe state of some points overwrites the evidence of no others.
func (e *Engine) settleInDoubt(ctx context.Context, on func(*point) bool) error {
	recs, err := e.inDoubt()
	if err != nil {
		return err
	}
	keys := slices.SortedFunc(maps.Keys(recs), func(a, b string) int { return cmp.Compare(recs[a].Seq, recs[b].Seq) })
	var errs []error
	for _, key := range keys {
		rec := recs[key]
		pt, ok := e.catalog().points[rec.Tool]
		if !ok || pt.c.Kind != manifest.KindDo {
			e.log.Warn("in-doubt write for a tool the manifest no longer has; left as is", "tool", rec.Tool, "key", key)
			continue
		}
		if !on(pt) {
			continue
		}
		// A call holding the key settles it itself: waited for only as a
		// retry of the key waits, since one wedged in its driver holds it
		// for as long as it is wedged.
		release, err := e.claim(ctx, key, rec.Fingerprint, pt.c.Timeout())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s key %s: left in doubt: %w", pt.tool, key, err))
			continue
		}
		// a call with this key may have settled it while we waited for the claim
		if rec, ok = e.idem.Load(key); ok && rec.InDoubt {
			errs = append(errs, e.settleAtStart(ctx, pt, key, rec))
		}
		release()
	}
	return errors.Join(errs...)
}

// chargeAtStart charges an in-doubt write that left before a crash and was
// never charged, from when it left. Without the write turn (ctx ended, or its
// holder is wedged) it charges nothing and the key is left in doubt.
func (e *Engine) chargeAtStart(ctx context.Context, pt *point, key string, rec Record) error {
	unlock, err := e.takeWrites(ctx, pt)
	if err != nil {
		return fmt.Errorf("%s key %s: left in doubt: %w", pt.tool, key, err)
	}
	defer unlock()
	if rec.Seq > 0 && !pt.site.charged(rec.Seq) {
		if err := e.charge(pt, Write{At: rec.SentAt, Value: rec.Response.AppliedValue, Seq: rec.Seq, Key: key}); err != nil {
			return fmt.Errorf("%s key %s: %w", pt.tool, key, err)
		}
	}
	return nil
}

func (e *Engine) settleAtStart(ctx context.Context, pt *point, key string, rec Record) error {
	if err := e.chargeAtStart(ctx, pt, key, rec); err != nil {
		return err
	}
	if _, err := e.waitLate(ctx, rec.LateUntil, nil); err != nil {
		return fmt.Errorf("%s key %s: the write may still reach the device until %s, so it is left in doubt: %w", pt.tool, key, promcp.Time(rec.LateUntil), err)
	}
	pt.site.endLate(key)
	unlock, err := e.takeWrites(ctx, pt)
	if err != nil {
		return fmt.Errorf("%s key %s: left in doubt: checking the device needs the write turn: %w", pt.tool, key, err)
	}
	defer unlock()
	at, began := e.now(), time.Now()
	resp, outcome := e.settle(ctx, pt, key, rec, false)
	switch outcome {
	case "":
		e.log.Info("in-doubt write not found on the device; a retry with its key writes", "tool", pt.tool, "key", key)
	case OutcomeSuperseded:
	case OutcomeConfirmed:
		e.auditDo(Caller{Identity: "physmcpd"}, pt, promcp.DoRequest{Value: rec.Response.AppliedValue, IdempotencyKey: key}, resp, OutcomeConfirmed, at, time.Since(began))
	default:
		return fmt.Errorf("%s key %s: %s", pt.tool, key, resp.Reason)
	}
	return nil
}
