//go:build !lite

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/state"
)

// Outcomes of the lines recoverAudit appends.
const (
	// outcomeRecovered: the store has the write's outcome, the trail had no line for it.
	outcomeRecovered = "recovered"
	// outcomeInDoubtRecovered: the write was sent (or about to be) and its
	// outcome is unknown; the trail had no line for it.
	outcomeInDoubtRecovered = "in_doubt_recovered"
)

// recoveredEntry is an engine.AuditEntry rebuilt from the store.
type recoveredEntry struct {
	engine.AuditEntry
	RecoveredAt time.Time `json:"recovered_at"`
	Note        string    `json:"note"`
}

// killBeforeAuditEnv names a test hook for test/crash, read once when the
// trail is opened and inert unless set to 1: the process then SIGKILLs
// itself when the first applied do_* write's audit line is due, after the
// store has recorded its outcome and before the line is written: the window
// recoverAudit closes, which random kills almost never hit.
const killBeforeAuditEnv = "PHYSMCPD_TEST_KILL_BEFORE_AUDIT"

// auditSink is the engine's Options.Audit: it appends entries to the trail.
func auditSink(trail *audit.Log, logger *slog.Logger) func(engine.AuditEntry) {
	killBeforeAudit := os.Getenv(killBeforeAuditEnv) == "1"
	return func(a engine.AuditEntry) {
		if killBeforeAudit && a.Outcome == engine.OutcomeApplied {
			logger.Warn("test hook: killed before the audit line", "env", killBeforeAuditEnv, "key", a.Key)
			if p, err := os.FindProcess(os.Getpid()); err == nil && p.Kill() == nil {
				select {} // the signal is on its way; write nothing more
			}
		}
		if err := trail.Append(a); err != nil {
			logger.Error("audit entry not recorded", "tool", a.Tool, "key", a.Key, "err", err)
		}
	}
}

// recoverAudit puts in the trail every write the store knows of that the
// trail lacks: the process can die between a write's outcome being stored
// and its audit line. It runs at start-up after the engine settled in-doubt
// keys (which audits those it confirms) and before anyone can call.
func (d *durable) recoverAudit(logger *slog.Logger) {
	if d.store == nil || d.trail == nil {
		return
	}
	n, err := recoverUnaudited(d.store, d.trail, time.Now())
	if n > 0 {
		logger.Warn("writes missing from the audit trail were recovered from the state store", "lines", n)
	}
	if err != nil {
		logger.Error("recovering unaudited writes into the audit trail", "err", err)
	}
}

// unaudited is a store record the trail may lack.
type unaudited struct {
	key string
	rec engine.Record
}

// recoverUnaudited appends a line for each record younger than the key
// retention that no line of the trail accounts for, oldest first, and says
// how many it appended.
func recoverUnaudited(store *state.Store, trail *audit.Log, now time.Time) (int, error) {
	var recs []unaudited
	storeErr := store.Records(func(key string, r engine.Record) error {
		if now.Sub(r.At) <= engine.KeyRetention {
			recs = append(recs, unaudited{key, r})
		}
		return nil
	})
	if len(recs) == 0 {
		return 0, storeErr
	}
	slices.SortFunc(recs, func(a, b unaudited) int { return a.rec.At.Compare(b.rec.At) })
	// a record's lines come after it was saved, so the trail is read from the oldest record's day
	seen, err := trailKeys(trail, recs[0].rec.At)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range recs {
		if accounted(u.rec, seen[trailKey(u.key)]) {
			continue
		}
		if err := trail.Append(recoveredLine(u.key, u.rec, now)); err != nil {
			return n, err
		}
		n++
	}
	return n, storeErr
}

// trailLine is what recovery reads of a line.
type trailLine struct {
	Key     json.RawMessage `json:"idempotency_key"`
	Outcome string          `json:"outcome"`
	Status  string          `json:"status"`
}

// trailKeys indexes the lines from since's day on by idempotency key (see trailKey).
func trailKeys(trail *audit.Log, since time.Time) (map[string][]trailLine, error) {
	seen := map[string][]trailLine{}
	err := trail.Scan(since, func(line []byte) error {
		var l trailLine
		if json.Unmarshal(line, &l) != nil || len(l.Key) == 0 {
			return nil // not a do_* line: events, overrides
		}
		var key string
		var d audit.Digest
		switch {
		case json.Unmarshal(l.Key, &key) == nil:
			key = trailKey(key)
		case json.Unmarshal(l.Key, &d) == nil && d.Truncated:
			key = "sha256:" + d.SHA256
		default:
			return nil
		}
		seen[key] = append(seen[key], l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail: %w", err)
	}
	return seen, nil
}

// trailKey is how key appears in the trail: itself, or its digest when it is
// longer than the trail keeps.
func trailKey(key string) string {
	if len(key) > audit.MaxValueBytes {
		return "sha256:" + audit.DigestOf(key).SHA256
	}
	return key
}

// accounted says whether the trail's lines for a key account for its record.
// An in-doubt record needs a line that says its write's outcome is unknown;
// a final one a line with its status that reports the outcome itself (not a
// replay of it, nor an earlier in-doubt answer).
func accounted(rec engine.Record, lines []trailLine) bool {
	for _, l := range lines {
		switch l.Outcome {
		case engine.OutcomeInDoubt, engine.OutcomeSuperseded, outcomeInDoubtRecovered:
			if rec.InDoubt {
				return true
			}
		case engine.OutcomeReplayed, engine.OutcomeKeyBusy:
		default:
			if !rec.InDoubt && l.Status == string(rec.Response.Status) {
				return true
			}
		}
	}
	return false
}

func recoveredLine(key string, r engine.Record, now time.Time) recoveredEntry {
	resp := r.Response
	e := recoveredEntry{
		AuditEntry: engine.AuditEntry{
			Time:       r.At,
			Caller:     cmp.Or(r.Caller, "unknown"),
			Role:       r.Role,
			Tool:       r.Tool,
			Arguments:  map[string]any{"value": resp.AppliedValue, "idempotency_key": key},
			Key:        key,
			Status:     resp.Status,
			Permission: resp.Permission,
			Reason:     resp.Reason,
			Outcome:    outcomeRecovered,
			Previous:   resp.PreviousValue,
			Applied:    resp.AppliedValue,
			Warnings:   resp.Warnings,
		},
		RecoveredAt: now.UTC(),
		Note:        "recovered from the state store at start-up: physmcpd stopped after recording this outcome and before writing its audit line",
	}
	if r.InDoubt {
		e.Time = r.SentAt
		if e.Time.IsZero() {
			e.Time = r.At
		}
		e.Outcome, e.Applied = outcomeInDoubtRecovered, nil
		e.Note = "recovered from the state store at start-up: physmcpd stopped after this write was sent, or about to be, and before its outcome was known; a retry with its key settles it"
	}
	return e
}
