package manifest

import "fmt"

// Space is one address space of a bus: a Modbus unit's table, or the
// register file of one I2C device (Table empty, Unit its address).
type Space struct {
	Bus   string
	Table ModbusTable
	Unit  int
}

// Span is what a binding reads or writes in its Space: registers (or coils,
// discrete inputs) lo..hi-1 of a Modbus table, or bytes lo..hi-1 of an I2C
// device, as a device with a byte-wide, auto-incrementing register pointer
// lays them out: a 2-byte register at 0x10 covers 0x10 and 0x11. Many chips
// instead give each pointer value a register of its own width (an ADS1115's
// 16-bit registers at 0x02 and 0x03), and the manifest does not say which
// a chip does, so an I2C span may overlap another where the chip's registers
// do not: good enough to drop cached readings a write may change, not to
// refuse a manifest.
type Span struct {
	Space
	Lo, Hi int
}

// Span is the stretch of registers or bytes b covers; false for a binding
// that has none (GPIO, virtual, or one not resolved).
func (b *Binding) Span() (Span, bool) {
	switch {
	case b.Modbus != nil:
		mb := b.Modbus
		n := mb.DataType.Registers(mb.Length)
		if n < 1 {
			return Span{}, false // an invalid type, reported by binding
		}
		return Span{Space{b.Bus, mb.Table, int(mb.Unit)}, int(mb.Address), int(mb.Address) + n}, true
	case b.I2C != nil:
		ib := b.I2C
		return Span{Space{Bus: b.Bus, Unit: int(ib.Address)}, int(ib.Register), int(ib.Register) + max(ib.Width, 1)}, true
	}
	return Span{}, false
}

// Overlaps reports whether s and o share a register or byte.
func (s Span) Overlaps(o Span) bool { return s.Space == o.Space && s.Lo < o.Hi && o.Lo < s.Hi }

// Range names the registers or bytes alone ("holding addresses 0-1",
// "registers 0x10-0x11").
func (s Span) Range() string {
	if s.Table == "" {
		if s.Hi-s.Lo == 1 {
			return fmt.Sprintf("register 0x%02x", s.Lo)
		}
		return fmt.Sprintf("registers 0x%02x-0x%02x", s.Lo, s.Hi-1)
	}
	if s.Hi-s.Lo == 1 {
		return fmt.Sprintf("%s address %d", s.Table, s.Lo)
	}
	return fmt.Sprintf("%s addresses %d-%d", s.Table, s.Lo, s.Hi-1)
}

// String names the span with its device and bus.
func (s Span) String() string {
	if s.Table == "" {
		return fmt.Sprintf("%s of I2C device 0x%02x on bus %s", s.Range(), s.Unit, s.Bus)
	}
	return fmt.Sprintf("%s of unit %d on bus %s", s.Range(), s.Unit, s.Bus)
}

// writeOverlaps refuses two do capabilities whose Modbus registers (or
// coils) overlap without starting at the same address. physmcpd orders
// writes, settles in-doubt writes and keeps late-write windows per register
// a binding starts at; a write to one of two overlapping bindings would
// change the other's value outside all of that (a retry could undo the
// other's later write). Bindings that start at the same address share all
// of it, and are allowed. I2C bindings are not refused, since whether two
// register addresses share bytes is the chip's (Span); those whose bytes
// may overlap write with the first of their group instead (WritesWith), so
// that their writes take turns and a retry of one sees the other's later
// write. (Two do capabilities on one GPIO line are refused in capabilities:
// a line is requested once.)
func (v *validator) writeOverlaps() {
	type site struct {
		c *Capability
		s Span
	}
	var sites []site
	for i, c := range v.m.Capabilities {
		if c.Kind != KindDo {
			continue
		}
		s, ok := c.Binding.Span()
		if !ok {
			continue
		}
		for _, o := range sites {
			if o.s.Lo == s.Lo || !o.s.Overlaps(s) || s.Table == "" {
				continue
			}
			v.errorf(c.Binding.At.Self, fmt.Sprintf("capabilities[%d].binding", i),
				"%s writes %s, overlapping %s (line %d), which writes %s: two do capabilities must bind the same start address or registers that do not overlap; "+
					"writes take turns, and in-doubt writes are settled, per start address, so a write to one could undo or race the other",
				c.ToolName(), s, o.c.ToolName(), o.c.At.Self.Line, o.s.Range())
			break
		}
		sites = append(sites, site{c, s})
	}
	// Overlapping I2C groups, transitively (0x10 and 0x12 join through a
	// 2-byte 0x11; one at the same start joins too, so that it keeps
	// sharing its register's site), each led by its first capability.
	lead := make([]int, len(sites))
	var find func(int) int
	find = func(i int) int {
		if lead[i] != i {
			lead[i] = find(lead[i])
		}
		return lead[i]
	}
	for i := range sites {
		lead[i] = i
		for j := range i {
			if sites[i].s.Table == "" && sites[i].s.Overlaps(sites[j].s) {
				a, b := find(i), find(j)
				lead[max(a, b)] = min(a, b)
			}
		}
	}
	for i, st := range sites {
		if l := find(i); l != i {
			st.c.WritesWith = sites[l].c
		}
	}
}
