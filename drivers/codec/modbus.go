package codec

import (
	"fmt"
	"math"
	"strconv"

	"github.com/physmcp/physmcpd/manifest"
)

// Modbus is a checked Modbus binding: NewModbus validates it once, then
// Decode and Encode run without re-checking.
type Modbus struct {
	b     *manifest.ModbusBinding
	v     value
	n     int     // registers (or bits) spanned
	it    intType // for integer types, bits and bools
	float bool
}

var modbusInts = map[manifest.ModbusType]intType{
	manifest.MBBool:   {name: "bool", bits: 1},
	manifest.MBBit:    {name: "bit", bits: 1},
	manifest.MBInt16:  {name: "int16", signed: true, bits: 16},
	manifest.MBUint16: {name: "uint16", bits: 16},
	manifest.MBInt32:  {name: "int32", signed: true, bits: 32},
	manifest.MBUint32: {name: "uint32", bits: 32},
	manifest.MBInt64:  {name: "int64", signed: true, bits: 64},
	manifest.MBUint64: {name: "uint64", bits: 64},
}

// MaxStringRegisters is the longest string one read can return (125 registers).
const MaxStringRegisters = 125

// NewModbus checks that b can carry c's data type and precomputes the scaling.
func NewModbus(b *manifest.ModbusBinding, c *manifest.Capability) (*Modbus, error) {
	m := &Modbus{b: b, n: b.DataType.Registers(b.Length)}
	if err := m.check(c); err != nil {
		return nil, fmt.Errorf("modbus unit %d %s %d %s: %w", b.Unit, b.Table, b.Address, b.DataType, err)
	}
	return m, nil
}

func (m *Modbus) check(c *manifest.Capability) error {
	b := m.b
	switch b.Table {
	case manifest.TableCoil, manifest.TableDiscreteInput:
		if b.DataType != manifest.MBBool {
			return fmt.Errorf("table %s holds bits: data type must be bool", b.Table)
		}
	case manifest.TableHolding, manifest.TableInput:
		if b.DataType == manifest.MBBool {
			return fmt.Errorf("table %s holds registers: use type bit for one bit of a register", b.Table)
		}
	default:
		return fmt.Errorf("unknown table %q", b.Table)
	}
	for _, o := range []manifest.ByteOrder{b.ByteOrder, b.WordOrder} {
		if o != "" && o != manifest.BigEndian && o != manifest.LittleEndian {
			return fmt.Errorf("byte/word order %q is neither big nor little", o)
		}
	}
	if m.n > 1 && b.DataType != manifest.MBString && (b.ByteOrder == "" || b.WordOrder == "") {
		return fmt.Errorf("multi-register type needs explicit byte_order and word_order")
	}
	var err error
	switch b.DataType {
	case manifest.MBString:
		if b.Length < 1 || b.Length > MaxStringRegisters {
			return fmt.Errorf("string length %d registers is outside 1..%d", b.Length, MaxStringRegisters)
		}
		if c.DataType != manifest.TypeString {
			return fmt.Errorf("a string register carries data_type string, not %s", c.DataType)
		}
		m.v, err = newValue(c, b.Scale, b.Offset)
		return err
	case manifest.MBFloat32, manifest.MBFloat64:
		if c.DataType != manifest.TypeFloat && c.DataType != manifest.TypeInt {
			return fmt.Errorf("a float register carries data_type float or int, not %s", c.DataType)
		}
		m.float = true
	case manifest.MBBit:
		if b.Bit < 0 || b.Bit > 15 {
			return fmt.Errorf("bit %d is outside 0..15", b.Bit)
		}
		fallthrough
	default:
		it, ok := modbusInts[b.DataType]
		if !ok {
			return fmt.Errorf("unknown modbus data type %q", b.DataType)
		}
		if c.DataType == manifest.TypeString {
			return fmt.Errorf("data_type string needs a string register")
		}
		m.it = it
	}
	m.v, err = newValue(c, b.Scale, b.Offset)
	return err
}

// Count is how many registers (or bits, for coils and discrete inputs) one value spans.
func (m *Modbus) Count() int { return m.n }

// Decode maps registers read from the binding's address (len = Count) to a
// capability value. For type bit it reads bit b.Bit of regs[0].
func (m *Modbus) Decode(regs []uint16) (any, string, error) {
	if len(regs) != m.n {
		return nil, "", fmt.Errorf("got %d registers, want %d", len(regs), m.n)
	}
	if m.b.Table.IsBits() {
		return nil, "", fmt.Errorf("table %s holds bits: use DecodeBits", m.b.Table)
	}
	switch m.b.DataType {
	case manifest.MBString:
		return decodeString(regs, m.b.ByteOrder)
	case manifest.MBBit:
		return m.v.fromInt(int64(regs[0]>>m.b.Bit) & 1)
	}
	u := m.join(regs)
	switch m.b.DataType {
	case manifest.MBFloat32:
		f := math.Float32frombits(uint32(u))
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return m.v.fromFloat(float64(f))
		}
		// the shortest decimal naming this float32, as the device meant it
		d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
		return m.v.fromFloat(d)
	case manifest.MBFloat64:
		return m.v.fromFloat(math.Float64frombits(u))
	}
	if m.it.signed {
		return m.v.fromInt(signExtend(u, m.it.bits))
	}
	return m.v.fromUint(u)
}

// Encode maps a capability value to the registers to write at the binding's
// address. Type bit needs the register's current content: use EncodeBit.
func (m *Modbus) Encode(x any) ([]uint16, error) {
	if m.b.Table.IsBits() || m.b.DataType == manifest.MBBit {
		return nil, fmt.Errorf("%s %s is a single bit: use EncodeBits or EncodeBit", m.b.Table, m.b.DataType)
	}
	switch m.b.DataType {
	case manifest.MBString:
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("value %v (%T) is not a string", x, x)
		}
		return encodeString(s, m.n, m.b.ByteOrder)
	case manifest.MBFloat32, manifest.MBFloat64:
		r, err := m.v.rawRat(x)
		if err != nil {
			return nil, err
		}
		// rationals have no negative zero; keep the client's sign when unscaled
		negZero := r.Sign() == 0 && m.v.lin.identity && isNegZero(x)
		if m.b.DataType == manifest.MBFloat32 {
			f, _ := r.Float32()
			if negZero {
				f = float32(math.Copysign(0, -1))
			}
			if math.IsInf(float64(f), 0) {
				return nil, fmt.Errorf("value %v (raw %s) is beyond the float32 range (±%g)", x, r.FloatString(3), math.MaxFloat32)
			}
			return m.split(uint64(math.Float32bits(f))), nil
		}
		f, _ := r.Float64()
		if negZero {
			f = math.Copysign(0, -1)
		}
		if math.IsInf(f, 0) {
			return nil, fmt.Errorf("value %v is beyond the float64 range", x)
		}
		return m.split(math.Float64bits(f)), nil
	}
	u, err := m.v.encodeInt(x, m.it)
	if err != nil {
		return nil, err
	}
	return m.split(u), nil
}

// DecodeBits maps a coil or discrete input (len(bits) = 1).
func (m *Modbus) DecodeBits(bits []bool) (any, string, error) {
	if !m.b.Table.IsBits() || len(bits) != 1 {
		return nil, "", fmt.Errorf("DecodeBits needs one bit of a coil or discrete input (table %s, %d bits)", m.b.Table, len(bits))
	}
	return m.v.fromInt(b2i(bits[0]))
}

// EncodeBits maps a capability value to the coil value to write.
func (m *Modbus) EncodeBits(x any) ([]bool, error) {
	if !m.b.Table.IsBits() {
		return nil, fmt.Errorf("table %s holds registers", m.b.Table)
	}
	u, err := m.v.encodeInt(x, m.it)
	return []bool{u == 1}, err
}

// EncodeBit merges a capability value into bit b.Bit of current, leaving the other bits alone.
func (m *Modbus) EncodeBit(x any, current uint16) (uint16, error) {
	if m.b.DataType != manifest.MBBit {
		return 0, fmt.Errorf("EncodeBit needs type bit, not %s", m.b.DataType)
	}
	u, err := m.v.encodeInt(x, m.it)
	if err != nil {
		return 0, err
	}
	return current&^(1<<m.b.Bit) | uint16(u)<<m.b.Bit, nil
}

// join assembles the registers into an unsigned value, most significant word first.
func (m *Modbus) join(regs []uint16) uint64 {
	var u uint64
	for i := range regs {
		r := regs[i]
		if m.b.WordOrder == manifest.LittleEndian {
			r = regs[len(regs)-1-i]
		}
		if m.b.ByteOrder == manifest.LittleEndian {
			r = r<<8 | r>>8
		}
		u = u<<16 | uint64(r)
	}
	return u
}

func (m *Modbus) split(u uint64) []uint16 {
	regs := make([]uint16, m.n)
	for i := range regs {
		r := uint16(u >> (16 * (m.n - 1 - i)))
		if m.b.ByteOrder == manifest.LittleEndian {
			r = r<<8 | r>>8
		}
		if m.b.WordOrder == manifest.LittleEndian {
			regs[m.n-1-i] = r
		} else {
			regs[i] = r
		}
	}
	return regs
}

func isNegZero(x any) bool {
	switch f := x.(type) {
	case float64:
		return f == 0 && math.Signbit(f)
	case float32:
		return f == 0 && math.Signbit(float64(f))
	}
	return false
}

func decodeString(regs []uint16, order manifest.ByteOrder) (any, string, error) {
	buf := make([]byte, 0, 2*len(regs))
	for _, r := range regs {
		hi, lo := byte(r>>8), byte(r)
		if order == manifest.LittleEndian {
			hi, lo = lo, hi
		}
		buf = append(buf, hi, lo)
	}
	for i, c := range buf {
		if c == 0 {
			buf = buf[:i]
			break
		}
		if c > 0x7e || (c < 0x20 && c != '\t') {
			return nil, fmt.Sprintf("device returned non-printable byte 0x%02x in a string", c), nil
		}
	}
	for len(buf) > 0 && buf[len(buf)-1] == ' ' {
		buf = buf[:len(buf)-1]
	}
	return string(buf), "", nil
}

func encodeString(s string, n int, order manifest.ByteOrder) ([]uint16, error) {
	if len(s) > 2*n {
		return nil, fmt.Errorf("string %q is %d bytes; %d registers hold at most %d", s, len(s), n, 2*n)
	}
	buf := make([]byte, 2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c > 0x7e || (c < 0x20 && c != '\t') {
			return nil, fmt.Errorf("string %q has a byte 0x%02x that is not printable ASCII", s, c)
		}
		buf[i] = s[i]
	}
	regs := make([]uint16, n)
	for i := range regs {
		hi, lo := buf[2*i], buf[2*i+1]
		if order == manifest.LittleEndian {
			hi, lo = lo, hi
		}
		regs[i] = uint16(hi)<<8 | uint16(lo)
	}
	return regs, nil
}

// DecodeRegisters decodes registers for b and c (see Modbus.Decode).
func DecodeRegisters(b *manifest.ModbusBinding, c *manifest.Capability, regs []uint16) (any, string, error) {
	m, err := NewModbus(b, c)
	if err != nil {
		return nil, "", err
	}
	return m.Decode(regs)
}

// EncodeRegisters encodes v for b and c (see Modbus.Encode).
func EncodeRegisters(b *manifest.ModbusBinding, c *manifest.Capability, v any) ([]uint16, error) {
	m, err := NewModbus(b, c)
	if err != nil {
		return nil, err
	}
	return m.Encode(v)
}

// DecodeBits decodes a coil or discrete input for b and c.
func DecodeBits(b *manifest.ModbusBinding, c *manifest.Capability, bits []bool) (any, string, error) {
	m, err := NewModbus(b, c)
	if err != nil {
		return nil, "", err
	}
	return m.DecodeBits(bits)
}

// EncodeBits encodes v as a coil value for b and c.
func EncodeBits(b *manifest.ModbusBinding, c *manifest.Capability, v any) ([]bool, error) {
	m, err := NewModbus(b, c)
	if err != nil {
		return nil, err
	}
	return m.EncodeBits(v)
}

// EncodeBit merges v into bit b.Bit of current.
func EncodeBit(b *manifest.ModbusBinding, c *manifest.Capability, v any, current uint16) (uint16, error) {
	m, err := NewModbus(b, c)
	if err != nil {
		return 0, err
	}
	return m.EncodeBit(v, current)
}
