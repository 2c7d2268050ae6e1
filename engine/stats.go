package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// The engine counts what it does in atomics, which Stats copies out when a
// monitoring edge asks (the Full build's /metrics). A tool call or bus
// transaction pays a few atomic adds and nothing else: no locks, no
// allocations, no knowledge of any metrics format.

// LatencyBounds are the upper bounds of the latency histograms' buckets,
// from a GPIO line (about 100 µs) through I2C (about 1 ms) and Modbus TCP
// (a few ms) to an RS-485 line at 9600 baud (tens of ms) and a device that
// runs into its timeout (seconds). Tool calls share them: a cached read falls
// in the first bucket, one waiting for a person in the last.
var LatencyBounds = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// histogram counts durations into LatencyBounds.
type histogram struct {
	counts [len(LatencyBounds) + 1]atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    atomic.Int64                          // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Histogram is a copy of a latency histogram.
type Histogram struct {
	// Counts[i] is how many durations were at most LatencyBounds[i] and
	// above the bound before it; the last element counts those above every
	// bound.
	Counts [len(LatencyBounds) + 1]uint64
	Sum    time.Duration
}

// Count is the number of durations observed.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

func (h *histogram) snapshot() Histogram {
	var s Histogram
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// RefusalPermissions are the permissions a refusal is counted under: the
// proMCP ones, physmcpd's extensions, KeyBusy for a do_* that gave up
// waiting for another call with its key, and PermissionNone for a do_* that
// failed without one (a malformed value, a reused idempotency key, state
// that could not be recorded).
var RefusalPermissions = [...]promcp.Permission{
	promcp.RequiresHumanApproval, promcp.PolicyDenied, promcp.RateLimited, promcp.CooldownActive, promcp.OutOfRange,
	promcp.PermissionInsufficient, promcp.SourceUnreachable, promcp.PartitionNoQuorum,
	promcp.DeviceRejected, promcp.Superseded, promcp.NotServed, KeyBusy, PermissionNone,
}

// PermissionNone is what a failed do_* without a permission is counted under.
const PermissionNone promcp.Permission = "none"

// KeyBusy is what a do_* that gave up waiting for another call with its
// idempotency key (OutcomeKeyBusy) is counted under: it answers
// source_unreachable, but sent nothing, unlike a write whose outcome is lost.
const KeyBusy promcp.Permission = OutcomeKeyBusy

// permissionIndex is p's index in RefusalPermissions.
func permissionIndex(p promcp.Permission) int {
	for i, q := range RefusalPermissions[:len(RefusalPermissions)-1] {
		if p == q {
			return i
		}
	}
	return len(RefusalPermissions) - 1
}

// Qualities are the read qualities, in the order ToolStats.Qualities counts them.
var Qualities = [...]promcp.Quality{promcp.QualityGood, promcp.QualityStale, promcp.QualityDegraded, promcp.QualityError}

// toolCounters are one tool's counters.
type toolCounters struct {
	calls    atomic.Uint64
	refusals [len(RefusalPermissions)]atomic.Uint64 // by RefusalPermissions
	// read_* only
	hits, misses atomic.Uint64
	qualities    [len(Qualities)]atomic.Uint64
	// do_* only
	replays atomic.Uint64
}

func (t *toolCounters) refused(p promcp.Permission) { t.refusals[permissionIndex(p)].Add(1) }

func (t *toolCounters) read(q promcp.Quality) {
	t.calls.Add(1)
	for i, v := range Qualities {
		if v == q {
			t.qualities[i].Add(1)
			return
		}
	}
}

// doAnswered counts a do_* call by its answer.
func (t *toolCounters) doAnswered(resp promcp.DoResponse, outcome string) {
	t.calls.Add(1)
	if outcome == OutcomeReplayed {
		t.replays.Add(1)
	}
	switch {
	case outcome == OutcomeKeyBusy:
		t.refused(KeyBusy)
	case resp.Status == promcp.StatusFailed:
		t.refused(resp.Permission)
	}
}

// NoteRefused records a call of tool by caller that a transport refused
// before it reached the engine: Permits said no (the HTTP edge answers 403,
// stdio and a serial line answer that no such tool is listed; p is
// permission_insufficient), or its arguments did not parse (p is "") or a
// person's approval did not hold (requires_human_approval). It is counted,
// an acting call (do_*, start_*, do_cancel_*, a sequence's do_*) is audited
// as every attempt to act is, and a read_* under defaults.audit_all as the
// reads the engine refuses are. args are the call's arguments as the
// transport decoded them (nil: none, or not an object); a do_*'s line keeps
// its value and idempotency_key. A tool the engine does not serve is not
// counted.
func (e *Engine) NoteRefused(caller Caller, tool string, p promcp.Permission, reason string, args map[string]any) {
	cat := e.catalog()
	pt, ok := cat.points[tool]
	if !ok {
		if tool == "can_do" {
			e.canDoCounts.refused(p)
		}
		if t := cat.tool(tool); t != nil && (t.Kind == ToolStart || t.Kind == ToolCancel || t.Kind == ToolSequence) {
			key, _ := args["idempotency_key"].(string)
			e.auditRefusedOp(caller, tool, args, key, p, reason, "")
		}
		return
	}
	pt.counts.refused(p)
	switch {
	case pt.c.Kind == manifest.KindDo:
		key, _ := args["idempotency_key"].(string)
		e.auditDo(caller, pt, promcp.DoRequest{Value: args["value"], IdempotencyKey: key},
			promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: key, Permission: p, Reason: reason}, "", e.now(), 0)
	case pt.c.Kind == manifest.KindRead && e.auditReads():
		e.auditRead(caller, pt, e.refusedRead(pt, deny(p, "%s", reason)), true, 0)
	}
}

// ToolStats are one tool's counts since the engine started.
type ToolStats struct {
	Tool string
	Kind ToolKind
	// Calls counts the calls that reached the engine.
	Calls uint64
	// Refusals counts, by RefusalPermissions, the read_* calls refused by
	// access rules (role, time window), the do_* calls answered with status
	// failed (refused by a check, refused by the device, sent with an
	// unknown outcome: source_unreachable, or gave up waiting for another
	// call with its key: KeyBusy), and the calls a transport
	// refused for the engine (NoteRefused), which Calls does not count.
	Refusals [len(RefusalPermissions)]uint64
	// read_*: served from the cache or not (a miss reads the device or
	// joins a read of it under way), and answers by quality (Qualities).
	CacheHits, CacheMisses uint64
	Qualities              [len(Qualities)]uint64
	// do_*: answers replayed from the idempotency store.
	Replays uint64
}

func (t *toolCounters) snapshot(name string, kind ToolKind) ToolStats {
	s := ToolStats{Tool: name, Kind: kind, Calls: t.calls.Load(), CacheHits: t.hits.Load(), CacheMisses: t.misses.Load(), Replays: t.replays.Load()}
	for i := range t.refusals {
		s.Refusals[i] = t.refusals[i].Load()
	}
	for i := range t.qualities {
		s.Qualities[i] = t.qualities[i].Load()
	}
	return s
}

// Bus transaction kinds: what leaves the device unchanged (a read, an adopted
// device's assessment for can_do) and what may change it.
type txOp int

const (
	opRead txOp = iota
	opWrite
)

// BusErrorKinds name the ways a transaction fails, in the order
// BusStats.Errors counts them:
//
//   - timeout: no answer within the capability's timeout;
//   - in_doubt: a write whose outcome the transport cannot tell;
//   - exception: the device answered and refused (a Modbus exception);
//   - unreachable: the device or its bus cannot be reached (including a
//     gateway that cannot reach its target, and a bus not open yet);
//   - circuit_open, busy: refused at once by the device's breaker or queue,
//     without reaching the bus;
//   - panic: the driver panicked;
//   - invalid: the driver refused the value before sending it;
//   - canceled: the caller gave up;
//   - other: anything else.
var BusErrorKinds = [...]string{"timeout", "in_doubt", "exception", "unreachable", "circuit_open", "busy", "panic", "invalid", "canceled", "other"}

const (
	errTimeout = iota
	errInDoubt
	errException
	errUnreachable
	errCircuitOpen
	errBusy
	errPanic
	errInvalid
	errCanceled
	errOther
)

// errorKind sorts a failed transaction's error into BusErrorKinds.
func errorKind(err error) int {
	// circuit_open, busy and panic are counted where they happen (transact).
	switch {
	case errors.Is(err, drivers.ErrInDoubt):
		return errInDoubt
	case errors.Is(err, drivers.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, drivers.ErrNotWritable), errors.Is(err, drivers.ErrOutOfRange):
		return errInvalid
	case errors.Is(err, context.Canceled):
		return errCanceled
	}
	if _, answered := deviceException(err); answered {
		return errException
	}
	var ex *drivers.ModbusException
	if errors.As(err, &ex) || errors.Is(err, drivers.ErrUnreachable) {
		return errUnreachable // a gateway's 10 or 11, or the transport's own
	}
	return errOther
}

// busCounters are one bus's counters.
type busCounters struct {
	name    string
	typ     manifest.BusType
	ops     [2]atomic.Uint64 // by txOp: transactions handed to the driver
	errors  [len(BusErrorKinds)]atomic.Uint64
	latency histogram
}

// sent counts a transaction the driver ran (ran: how long it took).
func (b *busCounters) sent(op txOp, ran time.Duration, err error) {
	b.ops[op].Add(1)
	b.latency.observe(ran)
	if err != nil {
		b.errors[errorKind(err)].Add(1)
	}
}

// BusStats are one bus's counts since the engine started.
type BusStats struct {
	Bus  string
	Type manifest.BusType
	// Reads and Writes count the transactions handed to the driver,
	// whatever their outcome.
	Reads, Writes uint64
	// Errors counts failed transactions by BusErrorKinds, including those
	// refused without reaching the bus (circuit_open, busy).
	Errors [len(BusErrorKinds)]uint64
	// Latency is the time the driver took, per transaction.
	Latency Histogram
}

// Stats are the engine's counts since it started, for monitoring.
type Stats struct {
	// Tools: read_*, do_* and can_do in the engine's order (operations'
	// tools are not counted yet). A do_*'s counts include the writes that
	// sequences and operations make through it.
	Tools []ToolStats
	// CallLatency is the time the engine took to answer a call, per verb.
	CallLatency map[ToolKind]Histogram
	// Buses, sorted by name. The devices' breakers are Devices'.
	Buses []BusStats
}

// Stats copies out the engine's counters. Each counter is read atomically;
// counters that change together (a call and its latency) may be one call
// apart in a copy taken while calls run.
func (e *Engine) Stats() Stats {
	s := Stats{CallLatency: map[ToolKind]Histogram{}}
	cat := e.catalog()
	for _, t := range cat.tools {
		switch t.Kind {
		case ToolRead, ToolDo:
			s.Tools = append(s.Tools, cat.points[t.Name].counts.snapshot(t.Name, t.Kind))
		case ToolCanDo:
			s.Tools = append(s.Tools, e.canDoCounts.snapshot(t.Name, t.Kind))
		}
	}
	for i, k := range verbs {
		s.CallLatency[k] = e.callLatency[i].snapshot()
	}
	for _, b := range cat.busCounts {
		bs := BusStats{Bus: b.name, Type: b.typ, Reads: b.ops[opRead].Load(), Writes: b.ops[opWrite].Load(), Latency: b.latency.snapshot()}
		for i := range b.errors {
			bs.Errors[i] = b.errors[i].Load()
		}
		s.Buses = append(s.Buses, bs)
	}
	slices.SortFunc(s.Buses, func(a, b BusStats) int { return strings.Compare(a.Bus, b.Bus) })
	return s
}

// verbs index Engine.callLatency.
var verbs = [...]ToolKind{ToolRead, ToolDo, ToolCanDo}

const (
	verbRead = iota
	verbDo
	verbCanDo
)
