// Package codec turns raw bus data into capability values and back. It does no
// I/O: the same functions serve real transports and the simulators.
//
// # Modbus byte and word order
//
// Byte order is the order of the two bytes inside each 16-bit register ("big"
// = high byte first, the protocol's own order). Word order is the order of the
// registers of a multi-register value ("big" = most significant register
// first). For a 32-bit value whose bytes, most significant first, are A B C D:
//
//	byte order  word order  registers        common name
//	big         big         [AB] [CD]        ABCD (big-endian)
//	big         little      [CD] [AB]        CDAB (word swap)
//	little      big         [BA] [DC]        BADC (byte swap)
//	little      little      [DC] [BA]        DCBA (little-endian)
//
// 64-bit values extend the same rule to four registers. Single-register types
// and strings use byte order only (default big); multi-register types must
// state both orders. Strings hold two printable ASCII characters per register
// (tab allowed), the first in the byte the byte order puts first; reads stop at
// the first NUL and drop trailing spaces (other bytes are flagged), writes pad
// with NUL and refuse anything else.
//
// # Scale and offset
//
// engineering value = raw × scale + offset (scale 0 means unset, i.e. 1). On
// reads the product is computed as (raw × M + O) / D with integers M, O, D
// derived from the shortest decimal forms of scale and offset whenever that is
// exact in float64, so raw 3 with scale 0.1 reads 0.3, not 0.30000000000000004.
// On writes raw = (value − offset) / scale is computed in exact rational
// arithmetic on the shortest decimal forms of value, scale and offset, then,
// for integer registers, rounded to the nearest integer with ties away from
// zero (12.35 at scale 0.1 is 123.5, written as 124) and checked against the
// register type's limits: a value that does not fit is an error naming the
// value and the limits, never wrapped or saturated. NaN and infinities are
// refused on write; a float register that holds NaN or ±Inf reads as a flagged
// sample (value nil) rather than an error, since the device did answer.
// float32 registers read as the shortest decimal that identifies the float32
// (230.1, not 230.10000610351562).
//
// # Capability data types
//
// Reads map the scaled value to the capability's data_type: float → float64;
// int → int64 (a scaled value is rounded to nearest, ties away from zero; an
// unscaled integer register is copied exactly); bool → bool (coils, discrete
// inputs, register bits and GPIO levels directly; integer registers: nonzero is
// true); string → string (string registers only); enum → the name at the
// integer index the register holds (an index with no name is flagged). Writes
// accept numbers (any Go integer or float type, or json.Number) for float and
// int (an int capability refuses 2.5 but takes 2.0), bool for bool, string for
// string and an enum name for enum. bool, enum and string capabilities must
// not be scaled.
package codec

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/physmcp/physmcpd/internal/exact"
	"github.com/physmcp/physmcpd/manifest"
)

// linear is raw × scale + offset.
type linear struct {
	scale, offset float64
	identity      bool
	// fast is set when scale = M/D and offset = O/D with integers below 2^53.
	fast    bool
	m, o, d float64
	// the decimals of scale and offset, made once: invert ran on every
	// write and made them anew each time (strconv and big.Rat's parser: a
	// fifth of what a do_* allocated)
	exactScale, exactOffset *big.Rat
}

const exactLimit = 1 << 53

func newLinear(scale, offset float64) (linear, error) {
	if scale == 0 {
		scale = 1
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) || math.IsNaN(offset) || math.IsInf(offset, 0) {
		return linear{}, fmt.Errorf("scale %v and offset %v must be finite numbers", scale, offset)
	}
	s, o := exact.Decimal(scale), exact.Decimal(offset)
	l := linear{scale: scale, offset: offset, identity: scale == 1 && offset == 0, exactScale: s, exactOffset: o}
	d := new(big.Int).Set(s.Denom())
	od := o.Denom()
	// lcm of two powers-of-2-and-5 denominators
	g := new(big.Int).GCD(nil, nil, d, od)
	d.Mul(d, od).Quo(d, g)
	m := new(big.Int).Mul(s.Num(), new(big.Int).Quo(d, s.Denom()))
	on := new(big.Int).Mul(o.Num(), new(big.Int).Quo(d, od))
	if fitsExact(d) && fitsExact(m) && fitsExact(on) {
		l.fast = true
		l.m, l.o, l.d = float64(m.Int64()), float64(on.Int64()), float64(d.Int64())
	}
	return l, nil
}

func fitsExact(x *big.Int) bool {
	return x.IsInt64() && x.Int64() < exactLimit && x.Int64() > -exactLimit
}

// apply computes raw × scale + offset.
func (l *linear) apply(x float64) float64 {
	if l.identity {
		return x
	}
	if l.fast {
		if p := x * l.m; math.Abs(p) < exactLimit {
			return (p + l.o) / l.d
		}
	}
	return x*l.scale + l.offset
}

// invert computes (v − offset) / scale exactly.
func (l *linear) invert(v *big.Rat) *big.Rat {
	if l.identity {
		return v
	}
	r := new(big.Rat).Sub(v, l.exactOffset) // read only: shared by concurrent writes
	return r.Quo(r, l.exactScale)
}

// intType is an integer register layout: a Modbus integer type, a bit or an I2C field.
type intType struct {
	name   string
	signed bool
	bits   uint
}

func (t intType) min() *big.Int {
	if !t.signed {
		return new(big.Int)
	}
	return new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), t.bits-1))
}

func (t intType) max() *big.Int {
	n := t.bits
	if t.signed {
		n--
	}
	m := new(big.Int).Lsh(big.NewInt(1), n)
	return m.Sub(m, big.NewInt(1))
}

// pattern returns the two's-complement bit pattern of x in t.bits bits, or an
// error naming the limits when x does not fit.
func (t intType) pattern(x *big.Int, shown func() string) (uint64, error) {
	if t.bits < 64 && x.IsInt64() {
		// in int64 when it fits, without the limits as big.Ints
		n, lo, hi := x.Int64(), int64(0), int64(1)<<t.bits-1
		if t.signed {
			lo, hi = -1<<(t.bits-1), 1<<(t.bits-1)-1
		}
		if lo <= n && n <= hi {
			return uint64(n) & (1<<t.bits - 1), nil
		}
	}
	lo, hi := t.min(), t.max()
	if x.Cmp(lo) < 0 || x.Cmp(hi) > 0 {
		return 0, fmt.Errorf("value %s does not fit %s (%s..%s)", shown(), t.name, lo, hi)
	}
	var u uint64
	if x.Sign() < 0 {
		u = uint64(x.Int64())
	} else {
		u = x.Uint64()
	}
	if t.bits < 64 {
		u &= 1<<t.bits - 1
	}
	return u, nil
}

// signExtend reads the low bits of u as a two's-complement number.
func signExtend(u uint64, bits uint) int64 {
	s := 64 - bits
	return int64(u<<s) >> s
}

// value maps a scaled number to the capability's data type.
type value struct {
	c   *manifest.Capability
	lin linear
}

func newValue(c *manifest.Capability, scale, offset float64) (value, error) {
	lin, err := newLinear(scale, offset)
	if err != nil {
		return value{}, err
	}
	switch c.DataType {
	case manifest.TypeFloat, manifest.TypeInt:
	case manifest.TypeBool, manifest.TypeEnum, manifest.TypeString:
		if !lin.identity {
			return value{}, fmt.Errorf("a %s capability cannot be scaled (scale %v, offset %v)", c.DataType, lin.scale, lin.offset)
		}
		if c.DataType == manifest.TypeEnum && len(c.EnumValues) == 0 {
			return value{}, fmt.Errorf("enum capability has no enum_values")
		}
	default:
		return value{}, fmt.Errorf("unknown data_type %q", c.DataType)
	}
	return value{c: c, lin: lin}, nil
}

// fromInt maps an integer raw value.
func (v *value) fromInt(i int64) (any, string, error) {
	switch v.c.DataType {
	case manifest.TypeInt:
		if v.lin.identity {
			return i, "", nil
		}
		return v.roundToInt(v.lin.apply(float64(i)))
	case manifest.TypeFloat:
		return v.lin.apply(float64(i)), "", nil
	case manifest.TypeBool:
		return i != 0, "", nil
	case manifest.TypeEnum:
		if i < 0 || i >= int64(len(v.c.EnumValues)) {
			return nil, fmt.Sprintf("enum index %d has no name (%d enum_values)", i, len(v.c.EnumValues)), nil
		}
		return v.c.EnumValues[i], "", nil
	}
	return nil, "", fmt.Errorf("data_type %s cannot hold an integer register", v.c.DataType)
}

// fromUint maps an unsigned 64-bit raw value.
func (v *value) fromUint(u uint64) (any, string, error) {
	if u <= math.MaxInt64 {
		return v.fromInt(int64(u))
	}
	switch v.c.DataType {
	case manifest.TypeInt:
		if v.lin.identity {
			return nil, fmt.Sprintf("value %d does not fit a 64-bit signed int", u), nil
		}
		return v.roundToInt(v.lin.apply(float64(u)))
	case manifest.TypeFloat:
		return v.lin.apply(float64(u)), "", nil
	case manifest.TypeBool:
		return true, "", nil
	case manifest.TypeEnum:
		return nil, fmt.Sprintf("enum index %d has no name (%d enum_values)", u, len(v.c.EnumValues)), nil
	}
	return nil, "", fmt.Errorf("data_type %s cannot hold an integer register", v.c.DataType)
}

// fromFloat maps a float raw value.
func (v *value) fromFloat(f float64) (any, string, error) {
	switch {
	case math.IsNaN(f):
		return nil, "device returned NaN", nil
	case math.IsInf(f, 1):
		return nil, "device returned +Inf", nil
	case math.IsInf(f, -1):
		return nil, "device returned -Inf", nil
	}
	switch v.c.DataType {
	case manifest.TypeFloat:
		return v.lin.apply(f), "", nil
	case manifest.TypeInt:
		return v.roundToInt(v.lin.apply(f))
	}
	return nil, "", fmt.Errorf("data_type %s cannot hold a float register", v.c.DataType)
}

func (v *value) roundToInt(f float64) (any, string, error) {
	r := math.Round(f)
	if math.IsInf(r, 0) || math.IsNaN(r) || r < math.MinInt64 || r >= math.MaxInt64 {
		return nil, fmt.Sprintf("scaled value %g does not fit a 64-bit signed int", f), nil
	}
	return int64(r), "", nil
}

// rawRat turns a client value into the exact raw number to encode (before
// rounding), enforcing the capability's data type.
func (v *value) rawRat(x any) (*big.Rat, error) {
	switch v.c.DataType {
	case manifest.TypeFloat, manifest.TypeInt:
		r, err := number(x)
		if err != nil {
			return nil, err
		}
		if v.c.DataType == manifest.TypeInt && !r.IsInt() {
			return nil, fmt.Errorf("value %v is not a whole number (data_type int)", x)
		}
		return v.lin.invert(r), nil
	case manifest.TypeBool:
		b, ok := x.(bool)
		if !ok {
			return nil, fmt.Errorf("value %v (%T) is not a bool", x, x)
		}
		if b {
			return big.NewRat(1, 1), nil
		}
		return new(big.Rat), nil
	case manifest.TypeEnum:
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("value %v (%T) is not an enum name; valid names: %q", x, x, v.c.EnumValues)
		}
		for i, name := range v.c.EnumValues {
			if name == s {
				return big.NewRat(int64(i), 1), nil
			}
		}
		return nil, fmt.Errorf("%q is not one of the enum values %q", s, v.c.EnumValues)
	}
	return nil, fmt.Errorf("data_type %s cannot be written to a numeric register", v.c.DataType)
}

// encodeInt returns the bit pattern of x for an integer layout.
func (v *value) encodeInt(x any, t intType) (uint64, error) {
	r, err := v.rawRat(x)
	if err != nil {
		return 0, err
	}
	i := exact.RoundHalfAway(r)
	// formatted only for the error: on every write it was a sixth of the codec's time
	shown := func() string {
		if v.lin.identity {
			return fmt.Sprint(x)
		}
		return fmt.Sprintf("%v (raw %s)", x, i)
	}
	return t.pattern(i, shown)
}

// number converts a client number to an exact rational.
func number(x any) (*big.Rat, error) {
	switch n := x.(type) {
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return nil, fmt.Errorf("value %v is not a finite number", n)
		}
		return exact.Decimal(n), nil
	case float32:
		if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
			return nil, fmt.Errorf("value %v is not a finite number", n)
		}
		r, _ := new(big.Rat).SetString(strconv.FormatFloat(float64(n), 'g', -1, 32))
		return r, nil
	case int:
		return new(big.Rat).SetInt64(int64(n)), nil
	case int8:
		return new(big.Rat).SetInt64(int64(n)), nil
	case int16:
		return new(big.Rat).SetInt64(int64(n)), nil
	case int32:
		return new(big.Rat).SetInt64(int64(n)), nil
	case int64:
		return new(big.Rat).SetInt64(n), nil
	case uint:
		return new(big.Rat).SetUint64(uint64(n)), nil
	case uint8:
		return new(big.Rat).SetUint64(uint64(n)), nil
	case uint16:
		return new(big.Rat).SetUint64(uint64(n)), nil
	case uint32:
		return new(big.Rat).SetUint64(uint64(n)), nil
	case uint64:
		return new(big.Rat).SetUint64(n), nil
	case json.Number:
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("value %q is not a finite number", n.String())
		}
		r, ok := new(big.Rat).SetString(n.String())
		if !ok {
			return nil, fmt.Errorf("value %q is not a number", n.String())
		}
		return r, nil
	}
	return nil, fmt.Errorf("value %v (%T) is not a number", x, x)
}

// Bool maps a single level (GPIO line) to and from a capability value.
type Bool struct{ v value }

// NewBool checks that c can be carried by one bit: bool, int (0/1), float
// (0/1) or enum (index 0/1).
func NewBool(c *manifest.Capability) (*Bool, error) {
	if c.DataType == manifest.TypeString {
		return nil, fmt.Errorf("data_type string cannot be carried by a single bit")
	}
	v, err := newValue(c, 1, 0)
	if err != nil {
		return nil, err
	}
	return &Bool{v: v}, nil
}

var bitType = intType{name: "bit", bits: 1}

// Decode maps a level to the capability value.
func (b *Bool) Decode(level bool) (any, string, error) { return b.v.fromInt(b2i(level)) }

// Encode maps a capability value to a level.
func (b *Bool) Encode(x any) (bool, error) {
	u, err := b.v.encodeInt(x, bitType)
	return u == 1, err
}

// DecodeBool maps a GPIO level to c's value (see Bool).
func DecodeBool(c *manifest.Capability, level bool) (any, string, error) {
	b, err := NewBool(c)
	if err != nil {
		return nil, "", err
	}
	return b.Decode(level)
}

// EncodeBool maps c's value to a GPIO level (see Bool).
func EncodeBool(c *manifest.Capability, x any) (bool, error) {
	b, err := NewBool(c)
	if err != nil {
		return false, err
	}
	return b.Encode(x)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
