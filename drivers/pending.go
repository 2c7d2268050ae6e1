package drivers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

// Degraded start-up (docs/deploy.md, "Start-up"). A bus or GPIO line that
// cannot be opened when the daemon starts (a USB adapter not enumerated yet,
// a line held by another process, permission denied) must not take the rest
// of the device down with it. A pending wrapper stands in for it: it has the
// bus's (or line's) interface, fails every call with ErrNotOpen and the
// reason, and opens the resource in the background with backoff; once it is
// open, calls go through to it. Drivers recover from later failures
// themselves, so a resource is pending only until its first open.

// ErrNotOpen: the bus or line has not been opened yet. It is ErrUnreachable,
// but the call failed before any bus traffic, so it says nothing about the
// device's health.
var ErrNotOpen = fmt.Errorf("%w: not open", ErrUnreachable)

// notOpenError says what is not open and why.
type notOpenError struct {
	what string
	why  error
}

func (e *notOpenError) Error() string   { return e.what + " not open: " + e.why.Error() }
func (e *notOpenError) Unwrap() []error { return []error{ErrNotOpen, e.why} }

// OpenOptions tune OpenAllWith.
type OpenOptions struct {
	// Strict: every bus and GPIO line must open at start-up; the first that
	// does not is the error (and nothing stays open).
	Strict bool
	// Logger hears each change of a pending resource's state (default slog.Default()).
	Logger *slog.Logger
	// OnOpen is called when a non-GPIO bus that was pending opens, before any
	// other call reaches it, so that the bus's safe state is written first:
	// calls made with ctx (or a context derived from it) go through. GPIO
	// lines need no hook: they are requested at their safe level.
	OnOpen func(ctx context.Context, bus string)
	// RetryFirst and RetryMax bound the wait between open attempts, which
	// doubles from the first to the longest (defaults 250 ms and 2 s, so a
	// resource that appears is in use within about 2 s).
	RetryFirst, RetryMax time.Duration
}

func (o *OpenOptions) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryFirst <= 0 {
		o.RetryFirst = 250 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 2 * time.Second
	}
	o.RetryMax = max(o.RetryMax, o.RetryFirst)
}

// pending is a resource (a bus or a line) that may not be open yet.
type pending[T any] struct {
	what   string // "bus rs485", for errors and logs
	open   func(context.Context) (T, error)
	settle func(context.Context) // nil: usable as soon as open
	opt    *OpenOptions

	ctx    context.Context // ends when the wrapper is closed
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	v      T
	isOpen bool  // v is set
	ready  bool  // open and settled: every call may use it
	err    error // why it is not open
}

type settlingKey struct{}

// newPending starts retrying open in the background; first is why the first attempt failed.
func newPending[T any](what string, open func(context.Context) (T, error), settle func(context.Context), first error, opt *OpenOptions) *pending[T] {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pending[T]{what: what, open: open, settle: settle, opt: opt, ctx: ctx, cancel: cancel, done: make(chan struct{}), err: first}
	opt.Logger.Warn(what+" unavailable: serving the rest, retrying in the background", "err", first)
	go p.retry()
	return p
}

// opened wraps a resource that is already open.
func opened[T any](what string, v T, opt *OpenOptions) *pending[T] {
	done := make(chan struct{})
	close(done)
	return &pending[T]{what: what, opt: opt, v: v, isOpen: true, ready: true, done: done, cancel: func() {}}
}

func (p *pending[T]) retry() {
	defer close(p.done)
	wait, last := p.opt.RetryFirst, p.err.Error()
	t := time.NewTimer(wait)
	defer t.Stop()
	for attempts := 2; ; attempts++ { // the first was OpenAllWith's
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		v, err := p.open(p.ctx)
		if err != nil {
			// once per state change: a new reason is news, the same one is not
			if msg := err.Error(); msg != last {
				p.opt.Logger.Warn(p.what+" still unavailable", "err", err)
				last = msg
			}
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			wait = min(2*wait, p.opt.RetryMax)
			t.Reset(wait)
			continue
		}
		p.mu.Lock()
		p.v, p.isOpen = v, true
		p.mu.Unlock()
		if p.ctx.Err() != nil {
			return // closed while opening: stop closes it
		}
		if p.settle != nil {
			p.settle(context.WithValue(p.ctx, settlingKey{}, p))
		}
		p.mu.Lock()
		p.ready = true
		p.mu.Unlock()
		// retry_wait is how long after it appeared, at most, the resource
		// was found: the wait before the attempt that opened it.
		p.opt.Logger.Info(p.what+" opened", "attempts", attempts, "retry_wait", wait)
		return
	}
}

// get returns the resource, or why it cannot be used yet.
func (p *pending[T]) get(ctx context.Context) (T, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var zero T
	switch {
	case p.ready, p.isOpen && ctx.Value(settlingKey{}) == p:
		return p.v, nil
	case p.isOpen:
		return zero, &notOpenError{p.what, errors.New("just opened, its safe state is being written")}
	}
	return zero, &notOpenError{p.what, p.err}
}

// stop ends the retries and returns the resource when it was opened.
func (p *pending[T]) stop() (T, bool) {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.v, p.isOpen
}

// pendingBus is what every kind of wrapped bus shares.
type pendingBus[T Bus] struct {
	*pending[T]
	desc string
}

// Describe is fixed when the wrapper is made: points and register locks are
// keyed by it, so it must not change when the bus opens.
func (b pendingBus[T]) Describe() string { return b.desc }

func (b pendingBus[T]) Close() error {
	if v, ok := b.stop(); ok {
		return v.Close()
	}
	return nil
}

type pendingModbus struct{ pendingBus[ModbusBus] }

func (b pendingModbus) ReadBits(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]bool, error) {
	mb, err := b.get(ctx)
	if err != nil {
		return nil, err
	}
	return mb.ReadBits(ctx, unit, table, addr, count)
}

func (b pendingModbus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	mb, err := b.get(ctx)
	if err != nil {
		return nil, err
	}
	return mb.ReadRegisters(ctx, unit, table, addr, count)
}

func (b pendingModbus) WriteCoils(ctx context.Context, unit uint8, addr uint16, values []bool) error {
	mb, err := b.get(ctx)
	if err != nil {
		return err
	}
	return mb.WriteCoils(ctx, unit, addr, values)
}

func (b pendingModbus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error {
	mb, err := b.get(ctx)
	if err != nil {
		return err
	}
	return mb.WriteRegisters(ctx, unit, addr, values)
}

type pendingI2C struct{ pendingBus[I2CBus] }

func (b pendingI2C) Tx(ctx context.Context, addr uint16, w, r []byte) error {
	ib, err := b.get(ctx)
	if err != nil {
		return err
	}
	return ib.Tx(ctx, addr, w, r)
}

// gpioChip is a GPIO chip, open or pending, whose lines are pending while
// they cannot be requested (busy, or the chip not open yet).
type gpioChip struct {
	pendingBus[GPIOChip]

	mu     sync.Mutex
	lines  []*pending[GPIOLine]
	closed bool
}

func (c *gpioChip) Line(name string, offset int, cfg LineConfig) (GPIOLine, error) {
	request := func(ctx context.Context) (GPIOLine, error) {
		chip, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		return chip.Line(name, offset, cfg)
	}
	l, err := request(context.Background())
	if err == nil {
		return l, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, err
	}
	what := fmt.Sprintf("line %d of %s", offset, c.what)
	if name != "" {
		what = fmt.Sprintf("line %s of %s", name, c.what)
	}
	// Outputs are requested at their safe level (cfg.Initial), so a line
	// that appears later starts safe without a hook.
	p := newPending(what, request, nil, err, c.pending.opt)
	c.lines = append(c.lines, p)
	return pendingLine{p}, nil
}

// Close stops the lines' retries before the chip goes, so no line is
// requested from a closed chip; the chip releases the lines it handed out.
func (c *gpioChip) Close() error {
	c.mu.Lock()
	c.closed = true
	lines := c.lines
	c.mu.Unlock()
	for _, l := range lines {
		l.stop()
	}
	return c.pendingBus.Close()
}

type pendingLine struct{ *pending[GPIOLine] }

func (l pendingLine) Read(ctx context.Context) (bool, error) {
	line, err := l.get(ctx)
	if err != nil {
		return false, err
	}
	return line.Read(ctx)
}

func (l pendingLine) Write(ctx context.Context, level bool) error {
	line, err := l.get(ctx)
	if err != nil {
		return err
	}
	return line.Write(ctx, level)
}

// as opens with open and checks that the bus has the interface its type needs.
func as[T Bus](open func(context.Context) (Bus, error)) func(context.Context) (T, error) {
	return func(ctx context.Context) (T, error) {
		var zero T
		b, err := open(ctx)
		if err != nil {
			return zero, err
		}
		t, ok := b.(T)
		if !ok {
			b.Close()
			return zero, fmt.Errorf("%s does not have the interface its bus type needs", b.Describe())
		}
		return t, nil
	}
}

// degrade wraps bus b of the manifest: a pending bus when first is the error
// of its first open, else (GPIO chips only) the opened chip, so that its
// lines can be pending.
func degrade(b *manifest.Bus, bus Bus, first error, open func(context.Context) (Bus, error), opt *OpenOptions) (Bus, error) {
	what, desc := "bus "+b.Name, describeBus(b)
	if first == nil {
		if b.Type != manifest.BusGPIO {
			return bus, nil
		}
		chip, ok := bus.(GPIOChip)
		if !ok {
			bus.Close()
			return nil, fmt.Errorf("%s is not a GPIO chip", bus.Describe())
		}
		return &gpioChip{pendingBus: pendingBus[GPIOChip]{opened(what, chip, opt), bus.Describe()}}, nil
	}
	var settle func(context.Context)
	if opt.OnOpen != nil {
		settle = func(ctx context.Context) { opt.OnOpen(ctx, b.Name) }
	}
	switch b.Type {
	case manifest.BusGPIO:
		return &gpioChip{pendingBus: pendingBus[GPIOChip]{newPending(what, as[GPIOChip](open), nil, first, opt), desc}}, nil
	case manifest.BusI2C:
		return pendingI2C{pendingBus[I2CBus]{newPending(what, as[I2CBus](open), settle, first, opt), desc}}, nil
	case manifest.BusModbusTCP, manifest.BusModbusRTU:
		return pendingModbus{pendingBus[ModbusBus]{newPending(what, as[ModbusBus](open), settle, first, opt), desc}}, nil
	}
	return nil, first
}

// describeBus names a bus that is not open, as its driver would.
func describeBus(b *manifest.Bus) string {
	switch {
	case b.I2C != nil && strings.HasPrefix(b.I2C.Device, "/dev/"):
		return "i2c " + b.I2C.Device
	case b.I2C != nil:
		return "i2c /dev/i2c-" + b.I2C.Device
	case b.GPIO != nil && b.GPIO.Path != "":
		return "gpio " + b.GPIO.Path
	case b.GPIO != nil:
		return "gpio chip " + b.GPIO.Chip
	case b.ModbusRTU != nil:
		return "modbus-rtu " + b.ModbusRTU.Port
	case b.ModbusTCP != nil:
		return "modbus-tcp " + b.ModbusTCP.Address
	}
	return string(b.Type)
}
