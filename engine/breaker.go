package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// Fault handling (docs/engine.md, "Faults"). A dead device must cost a caller
// microseconds, not a bus timeout per call, and must never leave the engine
// waiting forever. Three things do that:
//
//   - a circuit breaker per device: a Modbus unit (per bus), an I2C address
//     (per bus) or a GPIO chip. After BreakerThreshold consecutive transport
//     failures it opens and every transaction with the device fails at once;
//     after BreakerCooloff one transaction goes through as a probe, and its
//     success closes the breaker (its failure opens it again);
//   - a bounded queue per device: at most MaxQueued transactions may be in
//     flight or waiting for it; more fail at once instead of piling up;
//   - a driver that panics fails that one transaction (counted as a transport
//     failure) instead of taking the daemon down or leaving waiters stuck.
//
// The breaker is per device rather than per bus because one bus carries
// devices that fail alone: a meter behind an RS-485 line can lose power while
// the heater controller on the same line keeps answering. A bus that dies
// takes every device's breaker open after each has failed on its own.
const (
	BreakerThreshold = 5
	BreakerCooloff   = 10 * time.Second
	MaxQueued        = 32
)

var (
	// ErrCircuitOpen: the device failed repeatedly and is not being asked
	// until its cool-off ends. It wraps drivers.ErrUnreachable.
	ErrCircuitOpen = fmt.Errorf("circuit breaker open: %w", drivers.ErrUnreachable)
	// ErrDeviceBusy: MaxQueued transactions are already waiting for the device.
	ErrDeviceBusy = errors.New("device busy")
	// ErrDriverPanic: the driver panicked during the transaction; a write's
	// outcome is then unknown.
	ErrDriverPanic = errors.New("driver panic")
)

// faults holds the engine's per-device breakers; its zero value is ready to use.
type faults struct {
	devices sync.Map // device key → *device
}

type breakerState int

const (
	closed breakerState = iota
	open
	probing // open, and one transaction is trying the device
)

// device is one device's breaker and queue.
type device struct {
	name      string
	slots     chan struct{}
	questions questions // can_do's questions out to it (verdict.go)

	mu        sync.Mutex
	state     breakerState
	failures  int // consecutive transport failures
	openUntil time.Time
	lastErr   error
}

// deviceKey names the device a capability talks to (see faults above).
func deviceKey(c *manifest.Capability) string {
	b := c.Binding
	switch {
	case b.Modbus != nil:
		return b.Bus + " unit " + strconv.Itoa(int(b.Modbus.Unit))
	case b.I2C != nil:
		return b.Bus + " address 0x" + strconv.FormatUint(uint64(b.I2C.Address), 16)
	}
	return b.Bus
}

// device is pt's device, looked up by key once per point: points on one
// device share it.
func (e *Engine) device(pt *point) *device {
	if d := pt.dev.Load(); d != nil {
		return d
	}
	key := deviceKey(pt.c)
	d, _ := e.faults.devices.LoadOrStore(key, &device{name: key, slots: make(chan struct{}, MaxQueued)})
	pt.dev.Store(d.(*device))
	return d.(*device)
}

// admit says whether a transaction may go to the device now; when the
// cool-off is over it lets exactly one through as the probe.
func (d *device) admit(now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case open:
		if now.Before(d.openUntil) {
			return d.openError()
		}
		d.state = probing
	case probing:
		return fmt.Errorf("%w (%s: a probe is under way; last error: %v)", ErrCircuitOpen, d.name, d.lastErr)
	}
	return nil
}

func (d *device) openError() error {
	return fmt.Errorf("%w (%s failed %d times in a row, last: %v; next attempt after %s)",
		ErrCircuitOpen, d.name, d.failures, d.lastErr, d.openUntil.UTC().Format(time.RFC3339Nano))
}

// blocked reports an open breaker without claiming the probe (can_do), and
// when the next attempt may be made. It reads the clock only for an open
// breaker: can_do asks for every match.
func (d *device) blocked(now func() time.Time) (clearsAt time.Time, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.state == open && now().Before(d.openUntil):
		return d.openUntil, d.openError()
	case d.state == probing:
		return time.Time{}, fmt.Errorf("%w (%s: a probe is under way; last error: %v)", ErrCircuitOpen, d.name, d.lastErr)
	}
	return time.Time{}, nil
}

type outcome int

const (
	answered outcome = iota // the device answered (even with a refusal)
	failed                  // transport failure: no usable answer
	neutral                 // says nothing about the device (refused before the bus, caller gave up)
)

// classify sorts a transaction's error for the breaker.
func classify(err error) outcome {
	if err == nil {
		return answered // before ex, which errors.As puts on the heap
	}
	var (
		ex       *drivers.ModbusException
		declined *drivers.Declined
	)
	switch {
	case errors.As(err, &declined):
		return answered // an adopted source answered
	case errors.As(err, &ex):
		// A gateway that cannot reach its target (10, 11) is a dead device;
		// any other exception is the device answering.
		if ex.Code == 10 || ex.Code == 11 {
			return failed
		}
		return answered
	case errors.Is(err, drivers.ErrNotWritable), errors.Is(err, drivers.ErrOutOfRange), errors.Is(err, context.Canceled),
		// A bus not opened yet costs nothing to ask, and an open breaker
		// would keep its points dark for a cool-off after it opens.
		errors.Is(err, drivers.ErrNotOpen):
		return neutral
	}
	return failed
}

// record feeds a transaction's outcome to the breaker. change is what a
// DeviceEvent reports, "" when nothing changed (a probe that fails again
// reopens the breaker without a change).
func (d *device) record(now time.Time, err error) (opened bool, change string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch classify(err) {
	case answered:
		if d.failures > 0 || d.state != closed {
			change = DeviceReachable
		}
		d.state, d.failures, d.lastErr = closed, 0, nil
	case failed:
		d.failures++
		d.lastErr = err
		if d.failures == 1 {
			change = DeviceUnreachable
		}
		if d.state == probing || d.failures >= BreakerThreshold {
			opened = d.state != open
			if d.state == closed {
				change = DeviceBreakerOpen
			}
			d.state, d.openUntil = open, now.Add(BreakerCooloff)
		}
	case neutral:
		if d.state == probing {
			d.state = open // the probe learnt nothing; the next call probes
		}
	}
	return opened, change
}

// transact runs one driver transaction for pt through the device's queue and
// breaker, under the capability's timeout, and turns a driver panic into an
// error.
func (e *Engine) transact(ctx context.Context, pt *point, op txOp, f func(context.Context) error) (err error) {
	d := e.device(pt)
	select {
	case d.slots <- struct{}{}:
	default:
		pt.bus.errors[errBusy].Add(1)
		return fmt.Errorf("%s: %w: %d transactions are already waiting", d.name, ErrDeviceBusy, MaxQueued)
	}
	defer func() { <-d.slots }()
	if err := d.admit(e.now()); err != nil {
		pt.bus.errors[errCircuitOpen].Add(1)
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("driver panic recovered", "point", pt.drv.Describe(), "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s: %w: %v", pt.drv.Describe(), ErrDriverPanic, r)
			pt.bus.ops[op].Add(1) // timed did not get to count it
			pt.bus.errors[errPanic].Add(1)
		}
		opened, change := d.record(e.now(), err)
		if opened {
			e.log.Warn("circuit breaker opened", "device", d.name, "failures", BreakerThreshold, "cooloff", BreakerCooloff, "err", err)
		}
		if change != "" {
			e.deviceChanged(d, pt, change)
		}
	}()
	return e.timed(ctx, pt, op, f)
}

// breakerBlocks is can_do's view of the breaker: an open breaker blocks at
// once, with the moment the next attempt may be made.
func (e *Engine) breakerBlocks(pt *point) (clearsAt time.Time, err error) {
	return e.device(pt).blocked(e.now)
}
