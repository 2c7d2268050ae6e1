package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// flight collapses concurrent reads of one point into a single bus transaction.
type flight struct {
	mu   sync.Mutex
	call *flightCall
}

type flightCall struct {
	done chan struct{}
	gen  uint64 // the point's gen when the call began
	r    *reading
	err  error
}

// do runs f unless a call begun at gen or later (no write to the point
// between) is already under way, in which case it waits for that call's
// result. A call begun before a write may show the value from before it,
// which a caller that comes after the write must not be answered with (do_*
// then read_* to verify): that caller runs f itself, and later callers join
// its call instead. f runs detached from any one caller's cancellation so a
// caller that gives up does not fail the others.
func (f *flight) do(ctx context.Context, gen uint64, fn func() (*reading, error)) (*reading, error) {
	f.mu.Lock()
	if c := f.call; c != nil && c.gen >= gen {
		f.mu.Unlock()
		select {
		case <-c.done:
			return c.r, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &flightCall{done: make(chan struct{}), gen: gen}
	f.call = c
	f.mu.Unlock()

	c.r, c.err = fn()
	f.mu.Lock()
	if f.call == c {
		f.call = nil
	}
	f.mu.Unlock()
	close(c.done)
	return c.r, c.err
}

// latencyEstimate is an exponentially weighted mean of transaction times.
type latencyEstimate struct {
	mean time.Duration
	n    int
}

func (l *latencyEstimate) observe(d time.Duration) {
	if l.n == 0 {
		l.mean = d
	} else {
		l.mean = time.Duration(0.8*float64(l.mean) + 0.2*float64(d))
	}
	l.n++
}

// defaultLatency is the estimate before any transaction has been observed.
var defaultLatency = map[manifest.BusType]time.Duration{
	manifest.BusI2C:       time.Millisecond,
	manifest.BusGPIO:      100 * time.Microsecond,
	manifest.BusModbusTCP: 5 * time.Millisecond,
	manifest.BusModbusRTU: 20 * time.Millisecond,
	manifest.BusMCP:       20 * time.Millisecond,
}

func (pt *point) estimatedLatency() time.Duration {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.latency.n == 0 {
		return defaultLatency[pt.busType]
	}
	return pt.latency.mean
}

// staleLimit is how old the last good value may be and still be served as
// stale when the device stops answering; older than that it is no longer a
// useful observation and the read reports error.
func staleLimit(c *manifest.Capability) time.Duration {
	return max(time.Minute, 10*c.CacheTTL())
}

// servesStale says whether good, the last good value, may still be served
// as stale now that a live read failed. A local device that stops answering
// may be slow or briefly disturbed, so its value stays a useful observation
// up to staleLimit. A source that knows its outage (an adopted one, whose
// line or connection is gone or which answers without a value) is served
// for one cache TTL after it went out and no longer: the capability declares
// how long a value is fresh, and the only device that could refresh it is
// known to be gone, so an agent must learn it within that TTL and turn to
// another device. With no cache (cacheable: false) that is at once.
func (e *Engine) servesStale(pt *point, good *reading) bool {
	if e.now().Sub(good.at) > staleLimit(pt.c) {
		return false
	}
	if pt.outage == nil {
		return true
	}
	// Not out: this read failed short of the source (a full queue, the
	// caller gone) and says nothing about it.
	d, out := pt.outage.OutFor()
	return !out || d < pt.c.CacheTTL()
}

// sourceOut says whether pt's source is known to give no value now.
func sourceOut(pt *point) bool {
	if pt.outage == nil {
		return false
	}
	_, out := pt.outage.OutFor()
	return out
}

// sample reads the point from the bus (collapsing concurrent callers) and
// records the outcome.
func (e *Engine) sample(ctx context.Context, pt *point) (*reading, error) {
	pt.mu.Lock()
	gen := pt.gen
	pt.mu.Unlock()
	return pt.reads.do(ctx, gen, func() (*reading, error) { return e.measure(ctx, pt) })
}

// measure performs one read transaction and records its outcome. A reading
// that was under way while a write changed the same register or line is
// returned to its caller but not cached: it may show the value from before
// the write.
func (e *Engine) measure(ctx context.Context, pt *point) (*reading, error) {
	defer e.measured(pt) // after pt.mu is released below
	pt.mu.Lock()
	gen := pt.gen
	pt.mu.Unlock()
	// Asked before the read, so a stamp taken before the clock is set is
	// never reported as reliable.
	unsynced := !e.synced()
	var r *reading
	err := e.transact(context.WithoutCancel(ctx), pt, opRead, func(ctx context.Context) error {
		s, err := pt.drv.Read(ctx)
		if err != nil {
			return err
		}
		// Points stamp samples with the engine's clock (BindWith), so cache
		// ages, cooldowns and timestamps all come from one clock.
		r = &reading{value: s.Value, at: s.At, stamp: promcp.Time(s.At), flag: s.Flag, unsynced: unsynced, stale: s.Stale, source: s.Source}
		if r.flag == "" {
			r.flag = implausible(pt.c, s.Value)
		}
		return nil
	})
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if err != nil {
		pt.lastErr = err
		return nil, fmt.Errorf("%s: %w", pt.drv.Describe(), err)
	}
	pt.lastErr = nil
	if pt.gen == gen {
		pt.last = r
		if r.flag == "" && r.stale == "" {
			pt.lastGood = r
		}
	}
	return r, nil
}

// implausible says why a successfully read value cannot be trusted as it
// stands, or "" when it can.
func implausible(c *manifest.Capability, v any) string {
	if c.Range == nil {
		return ""
	}
	f, ok := v.(float64)
	if !ok {
		if i, isInt := v.(int64); isInt {
			f, ok = float64(i), true
		}
	}
	if !ok {
		return ""
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "the device returned a non-finite number"
	}
	if c.Range.Min != nil && f < *c.Range.Min || c.Range.Max != nil && f > *c.Range.Max {
		return fmt.Sprintf("value %v is outside the declared range %s", v, rangeText(c))
	}
	return ""
}

func rangeText(c *manifest.Capability) string {
	if c.Range == nil {
		return "(none)"
	}
	lo, hi := "-inf", "+inf"
	if c.Range.Min != nil {
		lo = fmt.Sprint(*c.Range.Min)
	}
	if c.Range.Max != nil {
		hi = fmt.Sprint(*c.Range.Max)
	}
	return "[" + lo + ", " + hi + "]" + unitSuffix(c)
}

func unitSuffix(c *manifest.Capability) string {
	if c.Unit == "" {
		return ""
	}
	return " " + c.Unit
}

// cached returns the latest reading when it is still within its TTL.
func (e *Engine) cached(pt *point) *reading { return e.cachedWithin(pt, pt.c.CacheTTL()) }

// cachedWithin returns the latest reading when it is younger than ttl and
// its source is not known to be out: a value whose source is gone is no
// longer fresh, whatever its age.
func (e *Engine) cachedWithin(pt *point, ttl time.Duration) *reading {
	if sourceOut(pt) {
		return nil
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if ttl <= 0 || pt.last == nil || e.now().Sub(pt.last.at) >= ttl {
		return nil
	}
	return pt.last
}

// invalidate drops the cached readings that a write to pt may have
// changed: of every point at its register or line, or overlapping its
// registers or bytes (catalog.changes).
func (e *Engine) invalidate(pt *point) {
	for _, other := range e.catalog().changes[pt.location] {
		other.mu.Lock()
		other.last = nil
		other.gen++
		other.mu.Unlock()
	}
}

// observe returns the point's current value: the cached reading when fresh,
// else a live read. On failure it falls back to the last good value (stale)
// for as long as that is still a useful observation.
func (e *Engine) observe(ctx context.Context, pt *point) promcp.ReadResponse {
	return e.observeWithin(ctx, pt, pt.c.CacheTTL())
}

// observeWithin is observe with a reading younger than maxAge counting as fresh.
func (e *Engine) observeWithin(ctx context.Context, pt *point, maxAge time.Duration) promcp.ReadResponse {
	r := e.cachedWithin(pt, maxAge)
	var err error
	if r == nil {
		pt.counts.misses.Add(1)
		r, err = e.sample(ctx, pt)
	} else {
		pt.counts.hits.Add(1)
	}
	return e.respond(pt, r, err)
}

// respond is the read_* answer for a read that gave r or failed with err.
func (e *Engine) respond(pt *point, r *reading, err error) promcp.ReadResponse {
	if err == nil {
		return e.answer(pt, r)
	}
	resp := promcp.ReadResponse{Unit: unitOf(pt.c), DeviceID: e.deviceID()}
	pt.mu.Lock()
	good := pt.lastGood
	pt.mu.Unlock()
	if good != nil && e.servesStale(pt, good) {
		resp.Value, resp.Timestamp, resp.Quality, resp.Source = good.value, good.stamp, promcp.QualityStale, good.source
		resp.Detail = fmt.Sprintf("live read failed (%v); serving the last good value", err)
		flagClock(&resp, good)
		return resp
	}
	resp.Value, resp.Timestamp, resp.Quality = nil, promcp.Time(e.now()), promcp.QualityError
	resp.Detail = err.Error()
	return resp
}

// answer is the response that serves the successful reading r of pt.
func (e *Engine) answer(pt *point, r *reading) promcp.ReadResponse {
	resp := promcp.ReadResponse{Unit: unitOf(pt.c), DeviceID: e.deviceID()}
	resp.Value, resp.Timestamp, resp.Quality, resp.Source = r.value, r.stamp, promcp.QualityGood, r.source
	switch {
	case r.flag != "":
		resp.Quality, resp.Detail = promcp.QualityDegraded, r.flag
	case r.stale != "":
		resp.Quality, resp.Detail = promcp.QualityStale, r.stale
	}
	flagClock(&resp, r)
	return resp
}

// Read answers a read_* tool. The error is non-nil only for an unknown tool.
// A caller the policy does not allow gets quality error and the reason.
func (e *Engine) Read(ctx context.Context, caller Caller, tool string) (promcp.ReadResponse, error) {
	pt, err := e.lookup(tool, manifest.KindRead)
	if err != nil {
		return promcp.ReadResponse{}, err
	}
	start := time.Now()
	var resp promcp.ReadResponse
	d := e.access(pt, caller)
	if d.permission != promcp.Allowed {
		pt.counts.refused(d.permission)
		resp = e.refusedRead(pt, d)
	} else {
		resp = e.observe(ctx, pt)
	}
	pt.counts.read(resp.Quality)
	took := time.Since(start)
	e.callLatency[verbRead].observe(took)
	if e.auditReads() {
		e.auditRead(caller, pt, resp, d.permission != promcp.Allowed, took)
	}
	return resp, nil
}

// refusedRead is the read_* answer to a caller the policy does not allow.
func (e *Engine) refusedRead(pt *point, d decision) promcp.ReadResponse {
	return promcp.ReadResponse{
		Value: nil, Unit: unitOf(pt.c), Timestamp: promcp.Time(e.now()),
		Quality: promcp.QualityError, DeviceID: e.deviceID(),
		Detail: fmt.Sprintf("%s: %s", d.permission, d.reason),
	}
}
