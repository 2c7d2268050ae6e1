package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/promcp"
)

// WedgeMargin is how long past its capability's timeout a driver transaction
// may still be running before Health reports its bus wedged. Drivers return
// by the deadline they are given (the Modbus bus enforces it on the wire), so
// a transaction this late is stuck in the driver or the kernel: a hung I2C
// adapter, a bus whose worker stopped, an ioctl that never returns.
const WedgeMargin = 10 * time.Second

// ErrUnhealthy wraps every reason Health gives.
var ErrUnhealthy = errors.New("engine unhealthy")

// begin notes a transaction of pt starting at now, for Health. It is tracked
// here, around every transaction the engine runs (breaker-guarded or a safe
// write), rather than inside the buses, so it holds whatever each driver
// does internally (a worker goroutine, callers under a lock, a blocking ioctl).
func (pt *point) begin(now time.Time) time.Time {
	pt.mu.Lock()
	pt.running = append(pt.running, now)
	pt.mu.Unlock()
	return now
}

// done drops one transaction begun at start. Transactions begun at the same
// instant are interchangeable, so any one entry equal to start will do.
func (pt *point) done(start time.Time) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if i := slices.Index(pt.running, start); i >= 0 {
		last := len(pt.running) - 1
		pt.running[i] = pt.running[last]
		pt.running = pt.running[:last]
	}
}

// oldest is when the longest-running transaction of pt began (zero when none runs).
func (pt *point) oldest() time.Time {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var t time.Time
	for _, s := range pt.running {
		if t.IsZero() || s.Before(t) {
			t = s
		}
	}
	return t
}

// Health reports whether the engine still serves, for a watchdog: it must
// answer before ctx ends (every lock the tool calls take can be taken), and
// no driver transaction may have run longer than its capability's timeout
// plus WedgeMargin. A bus that is merely absent or failing is not unhealthy:
// its capabilities degrade and it is reopened in the background.
// The error wraps ErrUnhealthy and says why.
func (e *Engine) Health(ctx context.Context) error {
	answer := make(chan error, 1)
	// A wedged lock would hold this goroutine for good; it ends with the
	// process, which the caller is about to have restarted.
	go func() { answer <- e.sweep() }()
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: it did not answer a health check: %w", ErrUnhealthy, context.Cause(ctx))
	}
}

// sweep takes the engine's locks in turn and finds the transaction furthest
// past its timeout, if any is beyond the margin.
func (e *Engine) sweep() error {
	// Taking each lock is the check that nothing holds it for good; the
	// points' locks are taken below.
	for _, l := range []sync.Locker{&e.inflight, &e.deadMu} {
		l.Lock()
		l.Unlock()
	}
	now := e.now()
	var worst *point
	var worstOver, worstRan time.Duration
	for _, pt := range e.catalog().points {
		start := pt.oldest()
		if start.IsZero() {
			continue
		}
		ran := now.Sub(start)
		if over := ran - pt.c.Timeout() - WedgeMargin; over > worstOver { // worstOver starts at 0
			worst, worstOver, worstRan = pt, over, ran
		}
	}
	if worst == nil {
		return nil
	}
	return fmt.Errorf("%w: a transaction of %s (%s) has run for %s, past its %s timeout: the driver or bus is wedged",
		ErrUnhealthy, worst.tool, worst.drv.Describe(), worstRan.Round(time.Millisecond), worst.c.Timeout())
}

// ClockUnsynced is the detail of a reading taken while the system clock was
// not synchronised: on a board without a real-time clock it starts at the
// epoch or at the last shutdown until NTP sets it.
const ClockUnsynced = "system clock not synchronised; timestamps are unreliable"

// flagClock marks a response built from r when r was taken with the clock
// unsynchronised: a good reading becomes degraded; stale and degraded ones
// keep their quality and gain the reason.
func flagClock(resp *promcp.ReadResponse, r *reading) {
	if !r.unsynced {
		return
	}
	if resp.Quality == promcp.QualityGood {
		resp.Quality = promcp.QualityDegraded
	}
	if resp.Detail == "" {
		resp.Detail = ClockUnsynced
	} else {
		resp.Detail += "; " + ClockUnsynced
	}
}
