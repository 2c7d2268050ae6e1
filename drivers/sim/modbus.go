package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/codec"
	"github.com/physmcp/physmcpd/manifest"
)

// DefaultModbusTimeout is how long an unknown unit keeps the bus waiting when
// the bus sets no timeout_ms.
const DefaultModbusTimeout = time.Second

// Protocol limits per request (Modbus application protocol v1.1b3).
const (
	maxReadRegisters  = 125
	maxReadBits       = 2000
	maxWriteRegisters = 123
	maxWriteCoils     = 1968
)

// Modbus simulates a set of Modbus units (slaves) on one TCP or RTU bus. Only
// addresses some capability is bound to exist; others answer exception 2. A
// unit no capability names does not answer (timeout), like on a real RTU line.
type Modbus struct {
	*core
	timeout time.Duration
	units   map[uint8]*unitMemory
}

type unitMemory struct {
	bits map[manifest.ModbusTable]map[uint16]bool
	regs map[manifest.ModbusTable]map[uint16]uint16
}

var tableSpace = map[manifest.ModbusTable]uint32{
	manifest.TableCoil: 1, manifest.TableDiscreteInput: 2, manifest.TableHolding: 3, manifest.TableInput: 4,
}

func space(unit uint8, t manifest.ModbusTable) uint32 { return uint32(unit)<<8 | tableSpace[t] }

func newModbus(c *core, b *manifest.Bus, caps []*manifest.Capability) (*Modbus, error) {
	ms := &Modbus{core: c, timeout: DefaultModbusTimeout, units: map[uint8]*unitMemory{}}
	if b.ModbusRTU != nil && b.ModbusRTU.TimeoutMs > 0 {
		ms.timeout = time.Duration(b.ModbusRTU.TimeoutMs) * time.Millisecond
	}
	if b.ModbusTCP != nil && b.ModbusTCP.TimeoutMs > 0 {
		ms.timeout = time.Duration(b.ModbusTCP.TimeoutMs) * time.Millisecond
	}
	for _, cp := range caps {
		mb := cp.Binding.Modbus
		if mb == nil {
			return nil, fmt.Errorf("capability %s on a modbus bus has no modbus binding", cp.Name)
		}
		enc, err := codec.NewModbus(mb, cp)
		if err != nil {
			return nil, fmt.Errorf("capability %s: %w", cp.Name, err)
		}
		u := ms.units[mb.Unit]
		if u == nil {
			u = &unitMemory{bits: map[manifest.ModbusTable]map[uint16]bool{}, regs: map[manifest.ModbusTable]map[uint16]uint16{}}
			ms.units[mb.Unit] = u
		}
		if int(mb.Address)+enc.Count() > 1<<16 {
			return nil, fmt.Errorf("capability %s: %d registers from %d run past address 65535", cp.Name, enc.Count(), mb.Address)
		}
		for a := int(mb.Address); a < int(mb.Address)+enc.Count(); a++ {
			if mb.Table.IsBits() {
				if u.bits[mb.Table] == nil {
					u.bits[mb.Table] = map[uint16]bool{}
				}
				if _, mapped := u.bits[mb.Table][uint16(a)]; !mapped {
					u.bits[mb.Table][uint16(a)] = false
				}
			} else {
				if u.regs[mb.Table] == nil {
					u.regs[mb.Table] = map[uint16]uint16{}
				}
				if _, mapped := u.regs[mb.Table][uint16(a)]; !mapped {
					u.regs[mb.Table][uint16(a)] = 0
				}
			}
		}
		if err := c.add(cp, &modbusCell{u: u, b: mb, enc: enc}); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// modbusCell is a capability's registers or bits in a unit's memory.
type modbusCell struct {
	u   *unitMemory
	b   *manifest.ModbusBinding
	enc *codec.Modbus
}

func (mc *modbusCell) region() region {
	return region{space(mc.b.Unit, mc.b.Table), int(mc.b.Address), int(mc.b.Address) + mc.enc.Count()}
}

func (mc *modbusCell) regs() []uint16 {
	out := make([]uint16, mc.enc.Count())
	for i := range out {
		out[i] = mc.u.regs[mc.b.Table][mc.b.Address+uint16(i)]
	}
	return out
}

func (mc *modbusCell) store(v any) error {
	switch {
	case mc.b.Table.IsBits():
		bits, err := mc.enc.EncodeBits(v)
		if err != nil {
			return err
		}
		mc.u.bits[mc.b.Table][mc.b.Address] = bits[0]
		return nil
	case mc.b.DataType == manifest.MBBit:
		reg, err := mc.enc.EncodeBit(v, mc.u.regs[mc.b.Table][mc.b.Address])
		if err != nil {
			return err
		}
		mc.u.regs[mc.b.Table][mc.b.Address] = reg
		return nil
	}
	regs, err := mc.enc.Encode(v)
	if err != nil {
		return err
	}
	for i, r := range regs {
		mc.u.regs[mc.b.Table][mc.b.Address+uint16(i)] = r
	}
	return nil
}

func (mc *modbusCell) load() (any, string, error) {
	if mc.b.Table.IsBits() {
		return mc.enc.DecodeBits([]bool{mc.u.bits[mc.b.Table][mc.b.Address]})
	}
	return mc.enc.Decode(mc.regs())
}

func exception(fc uint8, code uint8) error { return &drivers.ModbusException{Function: fc, Code: code} }

// begin runs the fault model, then finds the unit; an unknown unit leaves the
// request unanswered until the bus timeout.
func (ms *Modbus) begin(ctx context.Context, unit uint8) (*unitMemory, error) {
	if err := ms.transact(ctx); err != nil {
		return nil, err
	}
	u := ms.units[unit] // fixed after open
	if u == nil {
		if err := wait(ctx, ms.timeout); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("unit %d did not answer within %v: %w", unit, ms.timeout, drivers.ErrTimeout)
	}
	return u, nil
}

// ReadBits reads coils (FC1) or discrete inputs (FC2).
func (ms *Modbus) ReadBits(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]bool, error) {
	var fc uint8
	switch table {
	case manifest.TableCoil:
		fc = 1
	case manifest.TableDiscreteInput:
		fc = 2
	default:
		return nil, fmt.Errorf("ReadBits on table %s", table)
	}
	u, err := ms.begin(ctx, unit)
	if err != nil {
		return nil, err
	}
	if count == 0 || count > maxReadBits {
		return nil, exception(fc, 3)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	mem := u.bits[table]
	if !covered(len(mem), func(a uint16) bool { _, ok := mem[a]; return ok }, addr, count) {
		return nil, exception(fc, 2)
	}
	if err := ms.refresh(region{space(unit, table), int(addr), int(addr) + int(count)}); err != nil {
		return nil, fmt.Errorf("%w (%v)", exception(fc, 4), err)
	}
	out := make([]bool, count)
	for i := range out {
		out[i] = mem[addr+uint16(i)]
	}
	return out, nil
}

// ReadRegisters reads holding (FC3) or input (FC4) registers.
func (ms *Modbus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	var fc uint8
	switch table {
	case manifest.TableHolding:
		fc = 3
	case manifest.TableInput:
		fc = 4
	default:
		return nil, fmt.Errorf("ReadRegisters on table %s", table)
	}
	u, err := ms.begin(ctx, unit)
	if err != nil {
		return nil, err
	}
	if count == 0 || count > maxReadRegisters {
		return nil, exception(fc, 3)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	mem := u.regs[table]
	if !covered(len(mem), func(a uint16) bool { _, ok := mem[a]; return ok }, addr, count) {
		return nil, exception(fc, 2)
	}
	if err := ms.refresh(region{space(unit, table), int(addr), int(addr) + int(count)}); err != nil {
		return nil, fmt.Errorf("%w (%v)", exception(fc, 4), err)
	}
	out := make([]uint16, count)
	for i := range out {
		out[i] = mem[addr+uint16(i)]
	}
	return out, nil
}

// WriteCoils writes one coil (FC5) or several (FC15).
func (ms *Modbus) WriteCoils(ctx context.Context, unit uint8, addr uint16, values []bool) error {
	fc := uint8(15)
	if len(values) == 1 {
		fc = 5
	}
	u, err := ms.begin(ctx, unit)
	if err != nil {
		return err
	}
	if len(values) == 0 || len(values) > maxWriteCoils {
		return exception(fc, 3)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	mem := u.bits[manifest.TableCoil]
	if !covered(len(mem), func(a uint16) bool { _, ok := mem[a]; return ok }, addr, uint16(len(values))) {
		return exception(fc, 2)
	}
	for i, v := range values {
		mem[addr+uint16(i)] = v
	}
	return ms.written(region{space(unit, manifest.TableCoil), int(addr), int(addr) + len(values)})
}

// WriteRegisters writes one holding register (FC6) or several (FC16).
func (ms *Modbus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error {
	fc := uint8(16)
	if len(values) == 1 {
		fc = 6
	}
	u, err := ms.begin(ctx, unit)
	if err != nil {
		return err
	}
	if len(values) == 0 || len(values) > maxWriteRegisters {
		return exception(fc, 3)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	mem := u.regs[manifest.TableHolding]
	if !covered(len(mem), func(a uint16) bool { _, ok := mem[a]; return ok }, addr, uint16(len(values))) {
		return exception(fc, 2)
	}
	for i, v := range values {
		mem[addr+uint16(i)] = v
	}
	return ms.written(region{space(unit, manifest.TableHolding), int(addr), int(addr) + len(values)})
}

// SetRegisters puts raw values into a unit's table (holding or input), as the
// device itself might (a meter reporting NaN); points covering them are pinned.
func (ms *Modbus) SetRegisters(unit uint8, table manifest.ModbusTable, addr uint16, values []uint16) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	u := ms.units[unit]
	if u == nil || u.regs[table] == nil {
		return fmt.Errorf("%s: unit %d has no %s registers", ms.desc, unit, table)
	}
	mem := u.regs[table]
	if !covered(len(mem), func(a uint16) bool { _, ok := mem[a]; return ok }, addr, uint16(len(values))) {
		return fmt.Errorf("%s: unit %d %s %d..%d is not all bound", ms.desc, unit, table, addr, int(addr)+len(values)-1)
	}
	for i, v := range values {
		mem[addr+uint16(i)] = v
	}
	q := region{space(unit, table), int(addr), int(addr) + len(values)}
	for _, p := range ms.points {
		if p.cell.region().overlaps(q) {
			p.pinned = true
			p.remember()
		}
	}
	return nil
}

// covered reports whether every address of [addr, addr+count) exists.
func covered(size int, exists func(uint16) bool, addr, count uint16) bool {
	if int(addr)+int(count) > 1<<16 || int(count) > size {
		return false
	}
	for i := 0; i < int(count); i++ {
		if !exists(addr + uint16(i)) {
			return false
		}
	}
	return true
}
