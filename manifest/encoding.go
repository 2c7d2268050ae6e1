package manifest

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/physmcp/physmcpd/internal/exact"
)

// Encoding is what a numeric capability's binding can carry, in engineering
// units: the values a write can put on the bus and a read can return. It is
// the one description that validate checks ranges against and the engine
// quantises by, and it follows drivers/codec exactly (a test there
// cross-checks the two): a written value v becomes the raw number
// (v − offset) / scale, computed exactly on the shortest decimal forms of v,
// scale and offset; an integer register or I2C field rounds it to the nearest
// integer, ties away from zero, and refuses it when it does not fit.
type Encoding struct {
	// Step is the distance between neighbouring values, |scale|, for integer
	// registers and I2C fields (the values are Min + k·Step); 0 for float
	// registers, which are treated as continuous (a float32 keeps about 7
	// significant digits).
	Step float64
	// Min and Max are the least and greatest values the binding holds.
	Min, Max float64

	layout          string   // for messages: "uint16", "signed 12-bit I2C field"
	scaleF, offsetF float64  // as written, for messages
	scale, offset   *big.Rat // their exact decimal forms, as the codec uses them
	lo, hi          *big.Int // raw limits of an integer layout; nil for floats
	float32         bool     // a float32 register (else float64) when lo is nil
}

// Encoding describes what c's binding can carry. ok is false when c is not
// numeric (float or int) or its binding holds no number (a GPIO line, a coil,
// a register bit or string): ranges do not apply there.
func (c *Capability) Encoding() (enc Encoding, ok bool) {
	if !c.IsNumeric() {
		return Encoding{}, false
	}
	return c.encoding()
}

// encoding is Encoding for any data type, so that an enum's indexes can be
// checked against the register too.
func (c *Capability) encoding() (enc Encoding, ok bool) {
	var scale, offset float64
	switch b := c.Binding; {
	case b.Modbus != nil:
		scale, offset = b.Modbus.Scale, b.Modbus.Offset
		switch t := b.Modbus.DataType; t {
		case MBFloat32, MBFloat64:
			enc = Encoding{layout: string(t), float32: t == MBFloat32}
		case MBInt16, MBUint16, MBInt32, MBUint32, MBInt64, MBUint64:
			signed := t == MBInt16 || t == MBInt32 || t == MBInt64
			enc = Encoding{layout: string(t)}
			enc.lo, enc.hi = rawLimits(signed, uint(16*t.Registers(0)))
		default:
			return Encoding{}, false
		}
	case b.I2C != nil:
		scale, offset = b.I2C.Scale, b.I2C.Offset
		n := b.I2C.fieldBits()
		enc = Encoding{layout: fmt.Sprintf("unsigned %d-bit I2C field", n)}
		if b.I2C.Signed {
			enc.layout = fmt.Sprintf("signed %d-bit I2C field", n)
		}
		enc.lo, enc.hi = rawLimits(b.I2C.Signed, n)
	default:
		return Encoding{}, false
	}
	if scale == 0 { // unset, as in the codec
		scale = 1
	}
	enc.scaleF, enc.offsetF = scale, offset
	enc.scale, enc.offset = exact.Decimal(scale), exact.Decimal(offset)
	if enc.lo == nil {
		// the largest finite raw float; beyond it a write would be ±Inf
		limit := new(big.Rat).SetFloat64(math.MaxFloat64)
		if enc.float32 {
			limit.SetFloat64(math.MaxFloat32)
		}
		a, b := enc.value(new(big.Rat).Neg(limit)), enc.value(limit)
		enc.Min, enc.Max = finite(a, b, false), finite(a, b, true)
		return enc, true
	}
	enc.Step = math.Abs(scale)
	a, b := enc.value(new(big.Rat).SetInt(enc.lo)), enc.value(new(big.Rat).SetInt(enc.hi))
	enc.Min, enc.Max = enc.inward(a, b, false), enc.inward(a, b, true)
	return enc, true
}

// rawLimits are the least and greatest integers of a two's-complement or unsigned layout.
func rawLimits(signed bool, n uint) (lo, hi *big.Int) {
	one := big.NewInt(1)
	if !signed {
		return new(big.Int), new(big.Int).Sub(new(big.Int).Lsh(one, n), one)
	}
	half := new(big.Int).Lsh(one, n-1)
	return new(big.Int).Neg(half), half.Sub(half, one)
}

// fieldBits is the width of the I2C field: the bits of Mask, or the register
// above Shift without one (the codec's layout; validation made Mask one
// contiguous run starting at bit Shift).
func (b *I2CBinding) fieldBits() uint {
	if b.Mask != 0 {
		return uint(bits.Len64(b.Mask >> b.Shift))
	}
	return uint(8*max(b.Width, 1)) - b.Shift
}

// value is raw × scale + offset, exactly.
func (e Encoding) value(raw *big.Rat) *big.Rat {
	v := new(big.Rat).Mul(raw, e.scale)
	return v.Add(v, e.offset)
}

// raw is (v − offset) / scale, exactly, on the shortest decimal form of v.
func (e Encoding) raw(v float64) *big.Rat {
	r := new(big.Rat).Sub(exact.Decimal(v), e.offset)
	return r.Quo(r, e.scale)
}

// Quantize is what writing v puts on the bus, in engineering units: for an
// integer layout the nearest value the binding holds (ties away from zero) and
// exactly what a read returns; for a float register v itself. ok is false when
// the codec would refuse v as not fitting (or v is NaN or infinite).
// Data-type rules (an int capability takes whole numbers only) are not its concern.
func (e Encoding) Quantize(v float64) (q float64, ok bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || e.scale == nil {
		return 0, false
	}
	r := e.raw(v)
	if e.lo == nil {
		var inf bool
		if e.float32 {
			f, _ := r.Float32()
			inf = math.IsInf(float64(f), 0)
		} else {
			f, _ := r.Float64()
			inf = math.IsInf(f, 0)
		}
		if inf {
			return 0, false
		}
		return v, true
	}
	k := exact.RoundHalfAway(r)
	if k.Cmp(e.lo) < 0 || k.Cmp(e.hi) > 0 {
		return 0, false
	}
	q, _ = e.value(new(big.Rat).SetInt(k)).Float64()
	return q, true
}

// Within is the least and greatest values the binding holds inside lo..hi
// (what a range written as lo..hi lets through once values are quantised);
// ok is false when it holds none there.
func (e Encoding) Within(lo, hi float64) (least, greatest float64, ok bool) {
	if e.scale == nil || math.IsNaN(lo) || math.IsNaN(hi) || lo > hi {
		return 0, 0, false
	}
	lo, hi = math.Max(lo, e.Min), math.Min(hi, e.Max)
	if lo > hi {
		return 0, 0, false
	}
	if e.lo == nil {
		return lo, hi, true
	}
	a, b := e.raw(lo), e.raw(hi)
	if a.Cmp(b) > 0 { // a negative scale turns the interval round
		a, b = b, a
	}
	ka, kb := exact.Ceil(a), exact.Floor(b)
	if ka.Cmp(kb) > 0 {
		return 0, 0, false
	}
	// Rounding to float64 is monotonic, so these stay inside lo..hi.
	va, _ := e.value(new(big.Rat).SetInt(ka)).Float64()
	vb, _ := e.value(new(big.Rat).SetInt(kb)).Float64()
	return math.Min(va, vb), math.Max(va, vb), true
}

// String describes the encoding for messages, e.g. "uint16 × 0.01 holds 0..655.35".
func (e Encoding) String() string {
	s := e.layout
	if e.scaleF != 1 {
		s += " × " + g(e.scaleF)
	}
	if e.offsetF != 0 {
		s += " + " + g(e.offsetF)
	}
	return s + " holds " + g(e.Min) + ".." + g(e.Max)
}

func g(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// inward is the float64 nearest to the greater (upper) or lesser of a and b,
// moved towards the other one until the codec accepts it: beyond 2^53 the
// nearest float64, or its shortest decimal, can lie just outside what the
// register holds.
func (e Encoding) inward(a, b *big.Rat, upper bool) float64 {
	if (a.Cmp(b) > 0) != upper {
		a, b = b, a
	}
	f, _ := a.Float64()
	other, _ := b.Float64()
	for f != other {
		if _, ok := e.Quantize(f); ok {
			return f
		}
		f = math.Nextafter(f, other)
	}
	return f
}

// finite is the greater (upper) or lesser of a and b as a float64, kept finite.
func finite(a, b *big.Rat, upper bool) float64 {
	if (a.Cmp(b) > 0) != upper {
		a = b
	}
	f, _ := a.Float64()
	return math.Max(-math.MaxFloat64, math.Min(f, math.MaxFloat64))
}
