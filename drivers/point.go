package drivers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers/codec"
	"github.com/physmcp/physmcpd/manifest"
)

// ErrOutOfRange: a write was refused because the value is outside the
// capability's manifest range. The engine checks ranges first; the point
// checks again so that no code path can write past the hard limit.
var ErrOutOfRange = errors.New("value outside the capability's range")

// BindOptions tunes Bind; the zero value is right for production.
type BindOptions struct {
	// Now stamps samples (default time.Now).
	Now func() time.Time
}

// Bind ties capability c to an opened bus. The bus kind and the binding kind
// must agree. GPIO lines are requested here, once; outputs start at their safe level.
func Bind(bus Bus, c *manifest.Capability) (Point, error) {
	return BindWith(bus, c, BindOptions{})
}

// BindWith is Bind with options.
func BindWith(bus Bus, c *manifest.Capability, opt BindOptions) (Point, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	base := point{c: c, now: opt.Now, bus: bus}
	if c.Binding.Bus != "" {
		base.desc = fmt.Sprintf("%s (%s)", c.Binding.Bus, bus.Describe())
	} else {
		base.desc = bus.Describe()
	}
	var (
		p   Point
		err error
	)
	switch {
	case c.Binding.Modbus != nil:
		mb, ok := bus.(ModbusBus)
		if !ok {
			return nil, mismatch(c, bus, "modbus")
		}
		p, err = bindModbus(base, mb, c.Binding.Modbus)
	case c.Binding.I2C != nil:
		ib, ok := bus.(I2CBus)
		if !ok {
			return nil, mismatch(c, bus, "i2c")
		}
		p, err = bindI2C(base, ib, c.Binding.I2C)
	case c.Binding.GPIO != nil:
		gc, ok := bus.(GPIOChip)
		if !ok {
			return nil, mismatch(c, bus, "gpio")
		}
		p, err = bindGPIO(base, gc, c.Binding.GPIO)
	case c.Binding.Virtual != nil:
		vb, ok := bus.(VirtualBus)
		if !ok {
			return nil, mismatch(c, bus, "mcp")
		}
		p, err = vb.BindVirtual(c, opt)
	default:
		return nil, fmt.Errorf("capability %s: binding has no i2c, gpio, modbus or virtual part", c.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("capability %s on %s: %w", c.Name, base.desc, err)
	}
	return p, nil
}

func mismatch(c *manifest.Capability, bus Bus, kind string) error {
	return fmt.Errorf("capability %s has a %s binding but bus %s is not a %s bus", c.Name, kind, bus.Describe(), kind)
}

// point holds what every kind of point shares.
type point struct {
	c    *manifest.Capability
	bus  Bus
	desc string
	now  func() time.Time
}

func (p *point) Describe() string { return p.desc }

// checkWrite refuses writes to read capabilities and values past the manifest range.
func (p *point) checkWrite(v Value) error {
	if p.c.Kind == manifest.KindRead {
		return fmt.Errorf("%s: read capability %s: %w", p.desc, p.c.Name, ErrNotWritable)
	}
	if p.c.Range == nil || !p.c.IsNumeric() {
		return nil
	}
	f, ok := AsFloat(v)
	if !ok {
		return nil // the codec names the type error
	}
	if (p.c.Range.Min != nil && f < *p.c.Range.Min) || (p.c.Range.Max != nil && f > *p.c.Range.Max) {
		return fmt.Errorf("%s: %v for %s: %w (%s)", p.desc, v, p.c.Name, ErrOutOfRange, rangeText(p.c.Range))
	}
	return nil
}

func rangeText(r *manifest.Range) string {
	lo, hi := "-inf", "+inf"
	if r.Min != nil {
		lo = fmt.Sprint(*r.Min)
	}
	if r.Max != nil {
		hi = fmt.Sprint(*r.Max)
	}
	return lo + ".." + hi
}

func (p *point) sample(v any, flag string, err error) (Sample, error) {
	if err != nil {
		return Sample{}, fmt.Errorf("%s: decode: %w", p.desc, err)
	}
	return Sample{Value: v, Flag: flag, At: p.now()}, nil
}

// rmwLocks serialises read-modify-write cycles on one register, so two points
// sharing a register (bits of a status word, fields of an I2C register) cannot
// undo each other's writes. Keyed by the bus's description (its device path
// or address, unique in a process) and the register.
var rmwLocks sync.Map

type rmwKey struct {
	bus  string
	unit uint16
	reg  uint16
}

func lockRegister(bus Bus, unit, reg uint16) func() {
	m, _ := rmwLocks.LoadOrStore(rmwKey{bus.Describe(), unit, reg}, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// ---- Modbus

type modbusPoint struct {
	point
	mb  ModbusBus
	b   *manifest.ModbusBinding
	enc *codec.Modbus
}

func bindModbus(base point, mb ModbusBus, b *manifest.ModbusBinding) (Point, error) {
	enc, err := codec.NewModbus(b, base.c)
	if err != nil {
		return nil, err
	}
	p := &modbusPoint{point: base, mb: mb, b: b, enc: enc}
	p.desc = fmt.Sprintf("%s unit %d %s %d %s", p.desc, b.Unit, b.Table, b.Address, b.DataType)
	if b.DataType == manifest.MBBit {
		p.desc += fmt.Sprintf(" bit %d", b.Bit)
	}
	return p, nil
}

func (p *modbusPoint) Read(ctx context.Context) (Sample, error) {
	if p.b.Table.IsBits() {
		bits, err := p.mb.ReadBits(ctx, p.b.Unit, p.b.Table, p.b.Address, 1)
		if err != nil {
			return Sample{}, fmt.Errorf("%s: read: %w", p.desc, err)
		}
		if len(bits) != 1 {
			return Sample{}, fmt.Errorf("%s: read returned %d bits, want 1", p.desc, len(bits))
		}
		return p.sample(p.enc.DecodeBits(bits))
	}
	regs, err := p.readRegisters(ctx)
	if err != nil {
		return Sample{}, err
	}
	return p.sample(p.enc.Decode(regs))
}

func (p *modbusPoint) readRegisters(ctx context.Context) ([]uint16, error) {
	regs, err := p.mb.ReadRegisters(ctx, p.b.Unit, p.b.Table, p.b.Address, uint16(p.enc.Count()))
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", p.desc, err)
	}
	if len(regs) != p.enc.Count() {
		return nil, fmt.Errorf("%s: read returned %d registers, want %d", p.desc, len(regs), p.enc.Count())
	}
	return regs, nil
}

func (p *modbusPoint) Write(ctx context.Context, v Value) error {
	if !p.b.Table.Writable() {
		return fmt.Errorf("%s: %w", p.desc, ErrNotWritable)
	}
	if err := p.checkWrite(v); err != nil {
		return err
	}
	switch {
	case p.b.Table == manifest.TableCoil:
		bits, err := p.enc.EncodeBits(v)
		if err != nil {
			return fmt.Errorf("%s: %w", p.desc, err)
		}
		return p.wrap(p.mb.WriteCoils(ctx, p.b.Unit, p.b.Address, bits))
	case p.b.DataType == manifest.MBBit:
		// check the value before touching the bus
		if _, err := p.enc.EncodeBit(v, 0); err != nil {
			return fmt.Errorf("%s: %w", p.desc, err)
		}
		defer lockRegister(p.bus, uint16(p.b.Unit), p.b.Address)()
		regs, err := p.readRegisters(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		reg, err := p.enc.EncodeBit(v, regs[0])
		if err != nil {
			return fmt.Errorf("%s: %w", p.desc, err)
		}
		return p.wrap(p.mb.WriteRegisters(ctx, p.b.Unit, p.b.Address, []uint16{reg}))
	}
	regs, err := p.enc.Encode(v)
	if err != nil {
		return fmt.Errorf("%s: %w", p.desc, err)
	}
	return p.wrap(p.mb.WriteRegisters(ctx, p.b.Unit, p.b.Address, regs))
}

func (p *modbusPoint) Quantise(v Value) (Value, error) {
	var (
		got  any
		flag string
		err  error
	)
	switch {
	case p.b.Table.IsBits():
		var bits []bool
		if bits, err = p.enc.EncodeBits(v); err == nil {
			got, flag, err = p.enc.DecodeBits(bits)
		}
	case p.b.DataType == manifest.MBBit:
		var reg uint16
		if reg, err = p.enc.EncodeBit(v, 0); err == nil {
			got, flag, err = p.enc.Decode([]uint16{reg})
		}
	default:
		var regs []uint16
		if regs, err = p.enc.Encode(v); err == nil {
			got, flag, err = p.enc.Decode(regs)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.desc, err)
	}
	return held(got, flag, nil)
}

// held is a decoded value as Quantise returns it: a value the device would
// hold but a read would flag is not one to write.
func held(v any, flag string, err error) (Value, error) {
	if err == nil && flag != "" {
		err = errors.New(flag)
	}
	return v, err
}

func (p *modbusPoint) wrap(err error) error {
	if err != nil {
		return fmt.Errorf("%s: write: %w", p.desc, err)
	}
	return nil
}

// ---- I2C

type i2cPoint struct {
	point
	ib  I2CBus
	b   *manifest.I2CBinding
	enc *codec.I2C
}

func bindI2C(base point, ib I2CBus, b *manifest.I2CBinding) (Point, error) {
	enc, err := codec.NewI2C(b, base.c)
	if err != nil {
		return nil, err
	}
	p := &i2cPoint{point: base, ib: ib, b: b, enc: enc}
	p.desc = fmt.Sprintf("%s 0x%02x reg 0x%02x", p.desc, b.Address, b.Register)
	if b.Mask != 0 {
		p.desc += fmt.Sprintf(" mask 0x%x", b.Mask)
	}
	return p, nil
}

func (p *i2cPoint) readRaw(ctx context.Context) ([]byte, error) {
	data := make([]byte, p.enc.Width())
	if err := p.ib.Tx(ctx, p.b.Address, []byte{p.b.Register}, data); err != nil {
		return nil, fmt.Errorf("%s: read: %w", p.desc, err)
	}
	return data, nil
}

func (p *i2cPoint) Read(ctx context.Context) (Sample, error) {
	data, err := p.readRaw(ctx)
	if err != nil {
		return Sample{}, err
	}
	return p.sample(p.enc.Decode(data))
}

func (p *i2cPoint) Write(ctx context.Context, v Value) error {
	if err := p.checkWrite(v); err != nil {
		return err
	}
	var current []byte
	if p.enc.NeedsCurrent() {
		// check the value before touching the bus
		if _, err := p.enc.Encode(v, make([]byte, p.enc.Width())); err != nil {
			return fmt.Errorf("%s: %w", p.desc, err)
		}
		defer lockRegister(p.bus, p.b.Address, uint16(p.b.Register))()
		var err error
		if current, err = p.readRaw(ctx); err != nil {
			return fmt.Errorf("%w: %w", ErrNotSent, err)
		}
	}
	data, err := p.enc.Encode(v, current)
	if err != nil {
		return fmt.Errorf("%s: %w", p.desc, err)
	}
	if err := p.ib.Tx(ctx, p.b.Address, append([]byte{p.b.Register}, data...), nil); err != nil {
		return fmt.Errorf("%s: write: %w", p.desc, err)
	}
	return nil
}

func (p *i2cPoint) Quantise(v Value) (Value, error) {
	data, err := p.enc.Encode(v, make([]byte, p.enc.Width()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.desc, err)
	}
	return held(p.enc.Decode(data))
}

// ---- GPIO

type gpioPoint struct {
	point
	line GPIOLine
	b    *manifest.GPIOBinding
	enc  *codec.Bool
}

func bindGPIO(base point, gc GPIOChip, b *manifest.GPIOBinding) (Point, error) {
	enc, err := codec.NewBool(base.c)
	if err != nil {
		return nil, err
	}
	cfg := LineConfig{Direction: b.Direction, ActiveLow: b.ActiveLow, Bias: b.Bias}
	switch b.Direction {
	case manifest.DirOutput:
		if b.SafeLevel == nil {
			return nil, fmt.Errorf("output line has no safe level to start at")
		}
		// safe_level is physical; the line's levels are logical.
		cfg.Initial = *b.SafeLevel != b.ActiveLow
	case manifest.DirInput:
	default:
		return nil, fmt.Errorf("line direction %q is neither input nor output", b.Direction)
	}
	p := &gpioPoint{point: base, b: b, enc: enc}
	if b.Line != "" {
		p.desc = fmt.Sprintf("%s line %s", p.desc, b.Line)
	} else {
		p.desc = fmt.Sprintf("%s line %d", p.desc, b.Offset)
	}
	p.desc += " " + string(b.Direction)
	if p.line, err = gc.Line(b.Line, b.Offset, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *gpioPoint) Read(ctx context.Context) (Sample, error) {
	level, err := p.line.Read(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: read: %w", p.desc, err)
	}
	return p.sample(p.enc.Decode(level))
}

func (p *gpioPoint) Write(ctx context.Context, v Value) error {
	if p.b.Direction != manifest.DirOutput {
		return fmt.Errorf("%s: %w", p.desc, ErrNotWritable)
	}
	if err := p.checkWrite(v); err != nil {
		return err
	}
	level, err := p.enc.Encode(v)
	if err != nil {
		return fmt.Errorf("%s: %w", p.desc, err)
	}
	if err := p.line.Write(ctx, level); err != nil {
		return fmt.Errorf("%s: write: %w", p.desc, err)
	}
	return nil
}

func (p *gpioPoint) Quantise(v Value) (Value, error) {
	level, err := p.enc.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.desc, err)
	}
	return held(p.enc.Decode(level))
}

// ---- opening buses

// OpenAll opens every bus of m: with sim when the bus is marked simulated or
// simulateAll is set, else with the real driver for its type. Every bus must
// open: on failure the buses already opened are closed again.
func OpenAll(ctx context.Context, m *manifest.Manifest, real Openers, sim Opener, simulateAll bool) (map[string]Bus, error) {
	return OpenAllWith(ctx, m, real, sim, simulateAll, OpenOptions{Strict: true})
}

// OpenAllWith is OpenAll with options. Unless opt.Strict is set, a bus that
// cannot be opened, or a GPIO line that cannot be requested, is pending
// (pending.go) instead of an error; only a bus with no driver or simulator
// is an error then.
func OpenAllWith(ctx context.Context, m *manifest.Manifest, real Openers, sim Opener, simulateAll bool, opt OpenOptions) (map[string]Bus, error) {
	opt.defaults()
	names := slices.Sorted(maps.Keys(m.Buses))
	open := make(map[string]Bus, len(names))
	fail := func(err error) (map[string]Bus, error) {
		// Close in the reverse of the opening order, like deferred closes.
		for _, name := range slices.Backward(names) {
			if b, ok := open[name]; ok {
				b.Close()
			}
		}
		return nil, err
	}
	for _, name := range names {
		b := m.Buses[name]
		opener := real[b.Type]
		switch {
		// An mcp bus is never simulated: its source is simulated or real
		// by its own command line.
		case b.Simulated || simulateAll && b.Type != manifest.BusMCP:
			if sim == nil {
				return fail(fmt.Errorf("bus %s: simulated, but no simulator was given", name))
			}
			opener = sim
		case opener == nil:
			return fail(fmt.Errorf("bus %s: no driver for bus type %s in this build", name, b.Type))
		}
		bus, err := opener(ctx, m, b)
		if !opt.Strict {
			bus, err = degrade(b, bus, err, func(ctx context.Context) (Bus, error) { return opener(ctx, m, b) }, &opt)
		}
		if err != nil {
			return fail(fmt.Errorf("bus %s (%s): %w", name, b.Type, err))
		}
		open[name] = bus
	}
	return open, nil
}
