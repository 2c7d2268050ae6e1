package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Operations (docs/roadmap.md): a start_* runs in the background as a
// sequence of ordinary writes of the point it drives, and a sequence runs its
// steps; both are kept by id in an OperationStore, so read_status_* and a
// retried key still find them after a restart.

// Bounds on operations.
const (
	// MaxRunning is how many start_* operations may run at once (at most
	// one per driven point in any case).
	MaxRunning = 16
	// MaxKept is how many operation records are kept; the oldest ended
	// ones are forgotten first, and none is kept longer than KeyRetention.
	MaxKept = 256
)

// OperationRecord is one operation as the store keeps it.
type OperationRecord struct {
	ID          string
	Tool        string // start_* or a sequence's do_*
	Key         string // the idempotency key it was started with
	Fingerprint string
	Caller      string        `json:",omitempty"`
	Role        manifest.Role `json:",omitempty"`
	State       promcp.OpState
	Target      any `json:",omitempty"`
	DurationMs  int `json:",omitempty"`
	// From is the driven point's value at the start, and ObservedFrom the
	// observed reading's (a move's until).
	From         any `json:",omitempty"`
	ObservedFrom any `json:",omitempty"`
	Written      any `json:",omitempty"`
	Writes       int `json:",omitempty"`
	Progress     float64
	Started      time.Time
	Expected     time.Time `json:",omitzero"`
	Deadline     time.Time `json:",omitzero"`
	Updated      time.Time
	Ended        time.Time `json:",omitzero"`
	Reason       string    `json:",omitempty"`
	// Answer is the answer given to the call that started it (start_*), or
	// the sequence's final answer: a retried key gets it again.
	Answer json.RawMessage `json:",omitempty"`
}

// OperationStore keeps operation records by id. The Full profile persists
// them (state.Store); nil keeps them in memory.
type OperationStore interface {
	SaveOperation(r OperationRecord) error
	LoadOperations() ([]OperationRecord, error)
	DeleteOperations(ids ...string) error
}

// memoryOps is the OperationStore that forgets on restart.
type memoryOps struct {
	mu   sync.Mutex
	recs map[string]OperationRecord
}

func (m *memoryOps) SaveOperation(r OperationRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[r.ID] = r
	return nil
}

func (m *memoryOps) LoadOperations() ([]OperationRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]OperationRecord, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r)
	}
	return out, nil
}

func (m *memoryOps) DeleteOperations(ids ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.recs, id)
	}
	return nil
}

// runningOp is an operation the engine knows of; the runner fields are set
// only while it runs in this process.
type runningOp struct {
	rec OperationRecord // guarded by operations.mu
	o   *manifest.Operation
	pt  *point // the driven point (nil for a sequence)
	// changed is closed and replaced at every change, for waiters.
	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

// operations is the engine's set of operations.
type operations struct {
	e     *Engine
	mu    sync.Mutex
	store OperationStore
	byID  map[string]*runningOp
	byKey map[string]*runningOp
}

// loadOperations reads the stored operations. One that was running when the
// process stopped is ended as failed, never resumed: at start-up physmcpd
// drives every point with a safe value there (and an operation's point has
// one), the agent that started it may be gone, and the world moved on while
// nothing watched it. Its record says so, so read_status_* answers it.
func (e *Engine) loadOperations(store OperationStore) error {
	if store == nil {
		store = &memoryOps{recs: map[string]OperationRecord{}}
	}
	e.ops = &operations{e: e, store: store, byID: map[string]*runningOp{}, byKey: map[string]*runningOp{}}
	recs, err := store.LoadOperations()
	if err != nil {
		return fmt.Errorf("load the operations: %w", err)
	}
	now := e.now()
	var expired []string
	for _, r := range recs {
		o := e.m.Operation(r.Tool)
		if o == nil || now.Sub(r.Started) > KeyRetention {
			expired = append(expired, r.ID)
			continue
		}
		op := &runningOp{rec: r, o: o, changed: make(chan struct{})}
		if o.Kind == manifest.KindStart {
			op.pt = e.catalog().points[o.Target.ToolName()]
		}
		if r.State == promcp.OpRunning {
			op.rec.State, op.rec.Ended, op.rec.Updated = promcp.OpFailed, now, now
			op.rec.Reason = interruptedReason(op)
			if err := store.SaveOperation(op.rec); err != nil {
				return fmt.Errorf("record that operation %s was interrupted: %w", r.ID, err)
			}
			e.log.Warn("operation interrupted by a restart", "tool", r.Tool, "operation", r.ID, "writes", r.Writes, "last_written", r.Written)
		}
		e.ops.byID[r.ID] = op
		e.ops.byKey[r.Key] = op
	}
	if len(expired) > 0 {
		if err := store.DeleteOperations(expired...); err != nil {
			return fmt.Errorf("forget expired operations: %w", err)
		}
	}
	return nil
}

func interruptedReason(op *runningOp) string {
	if op.o.Kind == manifest.KindSequence {
		return fmt.Sprintf("physmcpd stopped while the sequence ran (it started %s); retry with the same idempotency_key: the steps that acted answer their first outcome and the rest act once", promcp.Time(op.rec.Started))
	}
	last := "nothing had been written yet"
	if op.rec.Writes > 0 {
		last = fmt.Sprintf("%d writes made, the last %v", op.rec.Writes, op.rec.Written)
	}
	safe, _ := op.o.Target.SafeValueOf()
	return fmt.Sprintf("interrupted: physmcpd stopped while the operation ran (%s); it is not resumed. At start-up physmcpd drives %s to its safe value %v", last, op.o.Target.ToolName(), safe)
}

// excludes says why a write of pt with key may not be made ("" when it
// may): another operation drives the point, or the key belongs to an operation.
func (ops *operations) excludes(pt *point, key string, by *runningOp) string {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	if op, ok := ops.byKey[key]; ok && op != by {
		return fmt.Sprintf("idempotency_key %q was already used for %s (operation %s); use a new key for a new action", key, op.rec.Tool, op.rec.ID)
	}
	for _, op := range ops.byID {
		if op != by && op.pt == pt && op.rec.State == promcp.OpRunning {
			return fmt.Sprintf("%s is being driven by %s (operation %s, until %s); cancel it with %s first", pt.tool, op.rec.Tool, op.rec.ID, promcp.Time(op.rec.Expected), op.o.CancelTool())
		}
	}
	return ""
}

// add records a new operation durably before it acts, and bounds the records kept.
func (ops *operations) add(op *runningOp) error {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	if err := ops.store.SaveOperation(op.rec); err != nil {
		return err
	}
	ops.byID[op.rec.ID] = op
	ops.byKey[op.rec.Key] = op
	if len(ops.byID) <= MaxKept {
		return nil
	}
	var ended []*runningOp
	for _, o := range ops.byID {
		if o.rec.State != promcp.OpRunning {
			ended = append(ended, o)
		}
	}
	slices.SortFunc(ended, func(a, b *runningOp) int { return a.rec.Updated.Compare(b.rec.Updated) })
	var drop []string
	for _, o := range ended[:min(len(ended), len(ops.byID)-MaxKept)] {
		drop = append(drop, o.rec.ID)
		delete(ops.byID, o.rec.ID)
		delete(ops.byKey, o.rec.Key)
	}
	if err := ops.store.DeleteOperations(drop...); err != nil {
		ops.e.log.Warn("old operations not forgotten", "err", err)
	}
	return nil
}

// update changes op's record, keeps progress from going back, stores it and
// wakes waiters.
func (ops *operations) update(op *runningOp, f func(r *OperationRecord)) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	before := op.rec.Progress
	f(&op.rec)
	op.rec.Progress = max(before, min(op.rec.Progress, 1))
	op.rec.Updated = ops.e.now()
	if err := ops.store.SaveOperation(op.rec); err != nil {
		ops.e.log.Error("operation state not recorded: after a restart read_status may show an older state", "operation", op.rec.ID, "err", err)
	}
	close(op.changed)
	op.changed = make(chan struct{})
}

// end ends op in state with reason, unless it has ended already.
func (ops *operations) end(op *runningOp, state promcp.OpState, reason string) {
	ops.update(op, func(r *OperationRecord) {
		if r.State != promcp.OpRunning {
			return
		}
		r.State, r.Reason, r.Ended = state, reason, ops.e.now()
		if state == promcp.OpSucceeded {
			r.Progress = 1
		}
	})
	ops.e.log.Info("operation ended", "tool", op.rec.Tool, "operation", op.rec.ID, "state", state, "reason", reason)
}

// get returns the operation with id and a snapshot of its record.
func (ops *operations) get(id string) (*runningOp, OperationRecord, <-chan struct{}, bool) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	op, ok := ops.byID[id]
	if !ok {
		return nil, OperationRecord{}, nil, false
	}
	return op, op.rec, op.changed, true
}

func (ops *operations) byKeyGet(key string) (*runningOp, OperationRecord, bool) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	op, ok := ops.byKey[key]
	if !ok {
		return nil, OperationRecord{}, false
	}
	return op, op.rec, true
}

// running counts the start_* operations running, and finds the one driving pt.
func (ops *operations) running(pt *point) (n int, driving *runningOp) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	for _, op := range ops.byID {
		if op.rec.State == promcp.OpRunning && op.pt != nil {
			n++
			if op.pt == pt {
				driving = op
			}
		}
	}
	return n, driving
}

// halt stops op's runner, if it runs in this process, and waits for it: no
// write of the operation lands after halt returns, but one wedged in its
// driver. A stopped runner returns once its transaction under way does
// (within its timeout; everything after fails on its ended context); one
// still in it WedgeMargin later is wedged (a hung adapter or ioctl), and
// waiting for it would hold the safe state, the dead man, a cancel and the
// shutdown for good. Its write then holds the point's write turn, and the
// safe state's write waits for it as for any other.
func (ops *operations) halt(op *runningOp) {
	ops.mu.Lock()
	stop, done := op.stop, op.done
	ops.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	var took time.Duration // the longest transaction it may be in
	if op.pt != nil {
		took = op.pt.c.Timeout()
	}
	if mv := op.o.Move; mv != nil {
		if src, ok := ops.e.catalog().points[mv.Source.ToolName()]; ok {
			took = max(took, src.c.Timeout())
		}
	}
	wait := took + WedgeMargin
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		ops.e.log.Error("an operation has not stopped: its driver or bus is wedged; it is ended without waiting for it",
			"tool", op.rec.Tool, "operation", op.rec.ID, "waited", wait)
	}
}

// stopOperations halts the running operations whose point on selects and
// ends them as failed with why: the safe state, shutdown or the dead man.
func (e *Engine) stopOperations(on func(*point) bool, why string) {
	if e.ops == nil {
		return
	}
	e.ops.mu.Lock()
	var stopping []*runningOp
	for _, op := range e.ops.byID {
		if op.rec.State == promcp.OpRunning && op.pt != nil && on(op.pt) {
			stopping = append(stopping, op)
		}
	}
	e.ops.mu.Unlock()
	slices.SortFunc(stopping, func(a, b *runningOp) int { return cmp.Compare(a.rec.ID, b.rec.ID) })
	for _, op := range stopping {
		e.ops.halt(op)
		safe, _ := op.o.Target.SafeValueOf()
		e.ops.end(op, promcp.OpFailed, fmt.Sprintf("stopped by physmcpd (%s); the safe state drives %s to %v", why, op.pt.tool, safe))
	}
}

// errStopped ends a runner that was halted.
var errStopped = errors.New("operation stopped")

// sleep waits d on the real clock, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errStopped
	case <-t.C:
		return nil
	}
}
