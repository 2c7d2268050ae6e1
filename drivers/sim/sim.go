// Package sim simulates buses behind the same transport interfaces as the real
// drivers (drivers.I2CBus, drivers.GPIOChip, drivers.ModbusBus), so points,
// the engine and the MCP server run unchanged without hardware.
//
// A simulated bus holds the device memory its capabilities are bound to (I2C
// register bytes, GPIO line levels, the four Modbus tables per unit), seeded
// by encoding each capability's initial value with the codec. Read points with
// a simulation block (noise, waveform, implausible_rate, follows) are
// recomputed at the clock's current time on every transaction that reads them;
// do points hold what was last written. Without a simulation block a read
// point holds 0, false, the first enum value or "", and a do point starts at
// its safe_value, else 0 when that is inside its range, else the range minimum.
//
// Each bus also misbehaves as configured (BusSim: latency, jitter, timeout and
// error rates, offline), repeatably for a fixed seed, and exposes controls for
// tests: SetOffline, SetFaults, FailNext, SetLatency, Writes, Transactions,
// SetValue and Value. Tests reach them by type-asserting the drivers.Bus that
// Open returns to *I2C, *Chip or *Modbus.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// ErrInjected is the generic I/O error a simulated bus returns for error_rate
// faults (and for FailNext with a nil error).
var ErrInjected = errors.New("simulated i/o error")

// Options configures an opener.
type Options struct {
	// Now is the clock simulated values follow (default time.Now).
	Now func() time.Time
}

// NewOpener returns a drivers.Opener for simulated buses. Buses opened from
// the same manifest by one opener share their capabilities, so a read point
// may follow a do point on another simulated bus.
func NewOpener(opt Options) drivers.Opener {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	r := &registry{worlds: map[*manifest.Manifest]*world{}}
	return func(ctx context.Context, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
		return open(ctx, opt, r, m, b)
	}
}

var defaultOpener = NewOpener(Options{})

// Open opens a simulated bus with the default options (real time).
func Open(ctx context.Context, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	return defaultOpener(ctx, m, b)
}

func open(ctx context.Context, opt Options, r *registry, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	name := b.Name
	if name == "" {
		for n, mb := range m.Buses {
			if mb == b {
				name = n
			}
		}
	}
	var caps []*manifest.Capability
	for _, c := range m.Capabilities {
		if c.Binding.Bus == name {
			caps = append(caps, c)
		}
	}
	c, err := newCore(opt, r, m, b)
	if err != nil {
		return nil, fmt.Errorf("simulated bus %s: %w", name, err)
	}
	var bus drivers.Bus
	switch {
	case b.Type == manifest.BusI2C:
		bus, err = newI2C(c, caps)
	case b.Type == manifest.BusGPIO:
		bus, err = newChip(c, caps)
	case b.Type.IsModbus():
		bus, err = newModbus(c, b, caps)
	default:
		err = fmt.Errorf("cannot simulate bus type %q", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("simulated bus %s: %w", name, err)
	}
	if s := b.Simulation; s != nil && s.WriteLog != "" {
		if err := c.openWriteLog(m, name, s.WriteLog); err != nil {
			return nil, fmt.Errorf("simulated bus %s: %w", name, err)
		}
	}
	c.register()
	return bus, nil
}

// registry holds one world per manifest: the simulated points by name.
type registry struct {
	mu     sync.Mutex
	worlds map[*manifest.Manifest]*world
}

type world struct {
	mu     sync.RWMutex
	points map[string]*simPoint
}

func (w *world) lookup(name string) *simPoint {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.points[name]
}

// core is what every simulated bus kind shares: the fault model, the clock,
// the points and the lock over the device memory.
type core struct {
	desc string
	now  func() time.Time
	reg  *registry
	m    *manifest.Manifest

	// mu guards the device memory of the bus kind, points' models and vals.
	mu     sync.Mutex
	points []*simPoint
	byName map[string]*simPoint
	vals   *rand.Rand // noise and implausible draws

	fmu         sync.Mutex
	faults      *rand.Rand
	latency     time.Duration
	jitter      time.Duration
	timeoutRate float64
	errorRate   float64
	offline     bool
	failN       int
	failErr     error

	txs, writes atomic.Int64
	closed      atomic.Bool

	wlog *writeLog // nil unless the bus has simulation.write_log
}

func newCore(opt Options, r *registry, m *manifest.Manifest, b *manifest.Bus) (*core, error) {
	c := &core{desc: "simulated " + string(b.Type), now: opt.Now, reg: r, m: m, byName: map[string]*simPoint{}}
	s := b.Simulation
	if s == nil {
		s = &manifest.BusSim{}
	}
	for _, rate := range []float64{s.TimeoutRate, s.ErrorRate} {
		if rate < 0 || rate > 1 {
			return nil, fmt.Errorf("fault rate %v is outside 0..1", rate)
		}
	}
	if s.LatencyMs < 0 || s.JitterMs < 0 {
		return nil, fmt.Errorf("latency %v ms and jitter %v ms must not be negative", s.LatencyMs, s.JitterMs)
	}
	seed := s.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	c.faults = rand.New(rand.NewSource(seed))
	c.vals = rand.New(rand.NewSource(seed + 1))
	c.latency = s.Latency()
	c.jitter = time.Duration(s.JitterMs * float64(time.Millisecond))
	c.timeoutRate, c.errorRate, c.offline = s.TimeoutRate, s.ErrorRate, s.Offline
	return c, nil
}

// register publishes the bus's points to its world, for follows.
func (c *core) register() {
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	w := c.reg.worlds[c.m]
	if w == nil {
		w = &world{points: map[string]*simPoint{}}
		c.reg.worlds[c.m] = w
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// the latest bus opened for a manifest wins (a re-open replaces the old one)
	for _, p := range c.points {
		w.points[p.c.ToolName()] = p
		p.world = w
	}
}

func (c *core) Describe() string { return c.desc }

// Close forgets the bus's points; further transactions fail as unreachable.
func (c *core) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.wlog != nil {
		c.mu.Lock()
		c.wlog.f.Close()
		c.mu.Unlock()
	}
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	w := c.reg.worlds[c.m]
	if w == nil {
		return nil
	}
	w.mu.Lock()
	for _, p := range c.points {
		if w.points[p.c.ToolName()] == p {
			delete(w.points, p.c.ToolName())
		}
	}
	empty := len(w.points) == 0
	w.mu.Unlock()
	if empty {
		delete(c.reg.worlds, c.m)
	}
	return nil
}

// SetOffline makes every transaction fail with drivers.ErrUnreachable (or stop doing so).
func (c *core) SetOffline(off bool) {
	c.fmu.Lock()
	c.offline = off
	c.fmu.Unlock()
}

// SetFaults sets the probabilities of a timeout and of a generic I/O error per transaction.
func (c *core) SetFaults(timeoutRate, errorRate float64) {
	c.fmu.Lock()
	c.timeoutRate, c.errorRate = timeoutRate, errorRate
	c.fmu.Unlock()
}

// FailNext makes the next n transactions fail with err (ErrInjected when nil), after the latency.
func (c *core) FailNext(n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	c.fmu.Lock()
	c.failN, c.failErr = n, err
	c.fmu.Unlock()
}

// SetLatency sets the base latency of each transaction (jitter is kept).
func (c *core) SetLatency(d time.Duration) {
	c.fmu.Lock()
	c.latency = d
	c.fmu.Unlock()
}

// Transactions counts every transaction attempted on the bus, failed or not.
func (c *core) Transactions() int64 { return c.txs.Load() }

// Writes counts write transactions the device applied.
func (c *core) Writes() int64 { return c.writes.Load() }

// SetValue sets a capability's value in the device memory, encoded through
// the codec exactly as its binding says, as if the physical world had changed.
// The point stops following its simulation model (it is pinned to v), so a
// test can force any value, including implausible ones.
func (c *core) SetValue(name string, v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.byName[name]
	if p == nil {
		return fmt.Errorf("%s: no capability %s on this bus", c.desc, name)
	}
	if err := p.cell.store(v); err != nil {
		return fmt.Errorf("%s: set %s to %v: %w", c.desc, name, v, err)
	}
	p.pinned = true
	p.remember()
	return nil
}

// Value decodes a capability's current value from the device memory (nil when
// the capability is unknown or its registers do not hold a usable value).
func (c *core) Value(name string) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.byName[name]
	if p == nil {
		return nil
	}
	v, _, err := p.cell.load()
	if err != nil {
		return nil
	}
	return v
}

// transact runs the fault model for one transaction: counts it, waits the
// latency (honouring ctx) and returns the injected fault, if any.
func (c *core) transact(ctx context.Context) error {
	c.txs.Add(1)
	if c.closed.Load() {
		return fmt.Errorf("%s is closed: %w", c.desc, drivers.ErrUnreachable)
	}
	c.fmu.Lock()
	if c.offline {
		c.fmu.Unlock()
		return fmt.Errorf("%s is offline: %w", c.desc, drivers.ErrUnreachable)
	}
	delay := c.latency
	if c.jitter > 0 {
		delay += time.Duration((2*c.faults.Float64() - 1) * float64(c.jitter))
	}
	var fault error
	switch {
	case c.failN > 0:
		c.failN--
		fault = c.failErr
	default:
		// always draw both so the sequence does not depend on the rates
		t, e := c.faults.Float64(), c.faults.Float64()
		if t < c.timeoutRate {
			fault = fmt.Errorf("no answer (simulated): %w", drivers.ErrTimeout)
		} else if e < c.errorRate {
			fault = ErrInjected
		}
	}
	c.fmu.Unlock()
	if err := wait(ctx, delay); err != nil {
		return err
	}
	return fault
}

// wait sleeps for d or until ctx ends. A missed deadline is also a timeout.
func wait(ctx context.Context, d time.Duration) error {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", drivers.ErrTimeout, err)
		}
		return err
	}
	return nil
}

// refresh recomputes the models of the points a read touches (caller holds mu).
func (c *core) refresh(q region) error {
	now := c.now()
	for _, p := range c.points {
		if p.model == nil || p.pinned || !p.cell.region().overlaps(q) {
			continue
		}
		v, err := p.model.at(now, c.vals, p.world)
		if err != nil {
			return fmt.Errorf("simulated %s: %w", p.c.Name, err)
		}
		if err := p.cell.store(v); err != nil {
			return fmt.Errorf("simulated %s = %v: %w", p.c.Name, v, err)
		}
	}
	return nil
}

// written counts an applied write and records what it left in the do points
// it touched, in the write log too when there is one (caller holds mu).
func (c *core) written(spans ...region) error {
	c.writes.Add(1)
	var touched []*simPoint
	for _, p := range c.points {
		for _, q := range spans {
			if p.c.Kind == manifest.KindDo && p.cell.region().overlaps(q) {
				p.remember()
				touched = append(touched, p)
				break
			}
		}
	}
	if c.wlog == nil || len(touched) == 0 {
		return nil
	}
	return c.wlog.append(c.now(), touched)
}

// add seeds a point's memory and lists it. A point without a value of its own
// (no simulation.initial, no safe_value) leaves memory that another point
// already seeded alone: a read of a setpoint must see the setpoint's value,
// not a default 0 written over it.
func (c *core) add(cp *manifest.Capability, cl cell) error {
	seed := hasOwnInitial(cp)
	if !seed {
		seed = true
		for _, other := range c.points {
			if other.cell.region().overlaps(cl.region()) {
				seed = false
				break
			}
		}
	}
	p, err := newSimPoint(c.m, cp, cl, c.now(), seed)
	if err != nil {
		return fmt.Errorf("capability %s: %w", cp.Name, err)
	}
	c.points = append(c.points, p)
	c.byName[cp.Name] = p
	return nil
}

// region is an address span in one address space of a bus.
type region struct {
	space  uint32
	lo, hi int // [lo, hi)
}

func (r region) overlaps(q region) bool { return r.space == q.space && r.lo < q.hi && q.lo < r.hi }
