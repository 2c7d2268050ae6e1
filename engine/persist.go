package engine

import (
	"context"
	"errors"
	"fmt"
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
}

// LimitStore keeps the write history of every do point, so a restart does not
// reset a cooldown or a rate window. The Full profile persists it; nil keeps
// it in memory only.
type LimitStore interface {
	// LoadWrites returns the history of every point that has one, by tool name.
	LoadWrites() (map[string]WriteHistory, error)
	// RecordWrite durably adds a write at `at` that left value on the device,
	// forgetting writes older than keep before at (the latest is always kept).
	RecordWrite(tool string, at time.Time, value any, keep time.Duration) error
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
	// Outcome says how the answer came about: applied, refused, failed,
	// replayed (a stored answer for a repeated key), confirmed (an in-doubt
	// write found on the device) or safe_state.
	Outcome    string   `json:"outcome"`
	Previous   any      `json:"previous_value"`
	Applied    any      `json:"applied_value"`
	Warnings   []string `json:"warnings,omitempty"`
	DurationMs float64  `json:"duration_ms"`
}

// Audit outcomes.
const (
	OutcomeApplied   = "applied"
	OutcomeRefused   = "refused"
	OutcomeFailed    = "failed"
	OutcomeReplayed  = "replayed"
	OutcomeConfirmed = "confirmed"
	OutcomeSafeState = "safe_state"
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
		pt, ok := e.points[tool]
		if !ok || pt.c.Kind != manifest.KindDo {
			e.log.Warn("write history of a tool the manifest no longer has; ignored", "tool", tool)
			continue
		}
		pt.writes = append([]time.Time(nil), h.Writes...)
		pt.lastWrite = h.Last
		e.log.Info("write history restored", "tool", tool, "last_write", h.Last, "last_value", h.LastValue, "writes_in_window", len(h.Writes))
	}
	return nil
}

// charge counts a write that reached the device at `at` against the point's
// cooldown and rate limits, in memory and in the LimitStore.
func (e *Engine) charge(pt *point, at time.Time, value any) error {
	longest := e.longestRate(pt)
	pt.mu.Lock()
	if at.After(pt.lastWrite) {
		pt.lastWrite = at
	}
	pt.writes = append(pt.writes, at)
	// keep the slice ordered: a confirmed in-doubt write may be older than the last
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
	e.invalidate(pt)
	if e.history == nil {
		return nil
	}
	if err := e.history.RecordWrite(pt.tool, at, value, max(longest, pt.c.Cooldown())); err != nil {
		e.log.Error("write history not recorded: a restart may forget this write's cooldown and rate limit", "tool", pt.tool, "err", err)
		return err
	}
	return nil
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
			outcome = OutcomeRefused
			if resp.Permission == "" || resp.Permission == promcp.SourceUnreachable {
				outcome = OutcomeFailed
			}
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

// SettleInDoubt resolves every idempotency key whose write outcome was lost
// (a crash or a timeout between the write and its record): the device is read,
// and when it shows the requested value the write is recorded as done (and its
// cooldown charged) without writing again. A key the device does not confirm
// stays in doubt, so a retry checks again. It runs before the safe state at
// start-up, which would otherwise overwrite the evidence. Stores that cannot
// list keys (the in-memory one) have nothing to settle after a restart.
func (e *Engine) SettleInDoubt(ctx context.Context) error {
	lister, ok := e.idem.(InDoubtLister)
	if !ok {
		return nil
	}
	recs, err := lister.InDoubt()
	if err != nil {
		return fmt.Errorf("list in-doubt writes: %w", err)
	}
	var errs []error
	for key, rec := range recs {
		pt, ok := e.points[rec.Tool]
		if !ok || pt.c.Kind != manifest.KindDo {
			e.log.Warn("in-doubt write for a tool the manifest no longer has; left as is", "tool", rec.Tool, "key", key)
			continue
		}
		release, _ := e.claim(key)
		// a call with this key may have settled it while we waited for the claim
		if rec, ok = e.idem.Load(key); !ok || !rec.InDoubt {
			release()
			continue
		}
		at, began := e.now(), time.Now()
		resp, done := e.resolveInDoubt(ctx, pt, key, rec)
		release()
		switch {
		case !done:
			e.log.Info("in-doubt write not found on the device; a retry with its key writes", "tool", pt.tool, "key", key)
		case resp.Status == promcp.StatusFailed:
			errs = append(errs, fmt.Errorf("%s key %s: %s", pt.tool, key, resp.Reason))
		default:
			e.auditDo(Caller{Identity: "physmcpd"}, pt, promcp.DoRequest{Value: rec.Response.AppliedValue, IdempotencyKey: key}, resp, OutcomeConfirmed, at, time.Since(began))
		}
	}
	return errors.Join(errs...)
}
