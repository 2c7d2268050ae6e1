package manifest

import "fmt"

// writeOverlaps refuses two do capabilities whose Modbus registers (or
// coils) overlap without starting at the same address. physmcpd orders
// writes, settles in-doubt writes and keeps late-write windows per register
// a binding starts at; a write to one of two overlapping bindings would
// change the other's value outside all of that (a retry could undo the
// other's later write). Bindings that start at the same address share all of
// it, and are allowed.
func (v *validator) writeOverlaps() {
	type span struct {
		c      *Capability
		path   string
		lo, hi int // registers lo..hi-1
	}
	var spans []span
	for i, c := range v.m.Capabilities {
		mb := c.Binding.Modbus
		if c.Kind != KindDo || mb == nil || !mb.Table.Writable() {
			continue
		}
		n := mb.DataType.Registers(mb.Length)
		if n < 1 {
			continue // an invalid type, reported by binding
		}
		s := span{c: c, path: fmt.Sprintf("capabilities[%d]", i), lo: int(mb.Address), hi: int(mb.Address) + n}
		for _, o := range spans {
			ob := o.c.Binding.Modbus
			if o.c.Binding.Bus != c.Binding.Bus || ob.Unit != mb.Unit || ob.Table != mb.Table || o.lo == s.lo || s.hi <= o.lo || o.hi <= s.lo {
				continue
			}
			v.errorf(c.Binding.At.Self, s.path+".binding",
				"%s writes %s %s of unit %d on bus %s, overlapping %s (line %d), which writes %s %s: two do capabilities must bind the same start address or registers that do not overlap; "+
					"writes take turns, and in-doubt writes are settled, per start address, so a write to one could undo or race the other",
				c.ToolName(), mb.Table, registerRange(s.lo, s.hi), mb.Unit, c.Binding.Bus, o.c.ToolName(), o.c.At.Self.Line, mb.Table, registerRange(o.lo, o.hi))
			break
		}
		spans = append(spans, s)
	}
}

func registerRange(lo, hi int) string {
	if hi-lo == 1 {
		return fmt.Sprintf("address %d", lo)
	}
	return fmt.Sprintf("addresses %d-%d", lo, hi-1)
}
