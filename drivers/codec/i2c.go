package codec

import (
	"fmt"
	"math/bits"

	"github.com/physmcp/physmcpd/manifest"
)

// I2C is a checked I2C register binding. The register is Width bytes in
// ByteOrder, read as an unsigned number; Mask (if set) selects bits, Shift
// moves them down, and the field that remains (the bit length of Mask>>Shift,
// or Width×8−Shift without a mask) is sign-extended when Signed, then scaled.
type I2C struct {
	b     *manifest.I2CBinding
	v     value
	width int
	field intType
	// place is the field's bits within the register; bits outside it belong to
	// something else and survive writes (read-modify-write).
	place uint64
}

// NewI2C checks b against c and precomputes the field layout.
func NewI2C(b *manifest.I2CBinding, c *manifest.Capability) (*I2C, error) {
	d, err := newI2C(b, c)
	if err != nil {
		return nil, fmt.Errorf("i2c 0x%02x reg 0x%02x: %w", b.Address, b.Register, err)
	}
	return d, nil
}

func newI2C(b *manifest.I2CBinding, c *manifest.Capability) (*I2C, error) {
	d := &I2C{b: b, width: b.Width}
	if d.width == 0 {
		d.width = 1
	}
	if d.width < 1 || d.width > 4 {
		return nil, fmt.Errorf("width %d bytes is outside 1..4", b.Width)
	}
	switch b.ByteOrder {
	case manifest.BigEndian, manifest.LittleEndian:
	case "":
		if d.width > 1 {
			return nil, fmt.Errorf("a %d-byte register needs an explicit byte_order", d.width)
		}
	default:
		return nil, fmt.Errorf("byte order %q is neither big nor little", b.ByteOrder)
	}
	regBits := uint(8 * d.width)
	all := uint64(1)<<regBits - 1
	if b.Shift >= regBits {
		return nil, fmt.Errorf("shift %d leaves no bits of a %d-bit register", b.Shift, regBits)
	}
	n := regBits - b.Shift
	if b.Mask != 0 {
		if b.Mask&^all != 0 {
			return nil, fmt.Errorf("mask 0x%x is wider than the %d-bit register", b.Mask, regBits)
		}
		n = uint(bits.Len64(b.Mask >> b.Shift))
		if n == 0 || b.Mask != (uint64(1)<<n-1)<<b.Shift {
			return nil, fmt.Errorf("mask 0x%x with shift %d is not one contiguous field starting at bit %d", b.Mask, b.Shift, b.Shift)
		}
	}
	if c.DataType == manifest.TypeString {
		return nil, fmt.Errorf("data_type string cannot be carried by an I2C register")
	}
	if b.Signed && n < 2 {
		return nil, fmt.Errorf("a signed field needs at least 2 bits")
	}
	d.field = intType{name: fmt.Sprintf("%d-bit field", n), signed: b.Signed, bits: n}
	if b.Signed {
		d.field.name = "signed " + d.field.name
	} else {
		d.field.name = "unsigned " + d.field.name
	}
	d.place = (uint64(1)<<n - 1) << b.Shift
	var err error
	d.v, err = newValue(c, b.Scale, b.Offset)
	return d, err
}

// Width is the register width in bytes.
func (d *I2C) Width() int { return d.width }

// NeedsCurrent reports whether a write must merge into the register's current
// content (the field does not cover the whole register).
func (d *I2C) NeedsCurrent() bool { return d.place != uint64(1)<<(8*d.width)-1 }

// Decode maps the Width bytes read from the register to a capability value.
func (d *I2C) Decode(data []byte) (any, string, error) {
	if len(data) != d.width {
		return nil, "", fmt.Errorf("got %d bytes, want %d", len(data), d.width)
	}
	u := (d.join(data) & d.place) >> d.b.Shift
	if d.field.signed {
		return d.v.fromInt(signExtend(u, d.field.bits))
	}
	return d.v.fromUint(u)
}

// Encode maps a capability value to the Width bytes to write. When the field
// does not cover the register, current (the register as just read) supplies
// the other bits; it is ignored otherwise and may be nil.
func (d *I2C) Encode(x any, current []byte) ([]byte, error) {
	u, err := d.v.encodeInt(x, d.field)
	if err != nil {
		return nil, err
	}
	reg := u << d.b.Shift
	if d.NeedsCurrent() {
		if len(current) != d.width {
			return nil, fmt.Errorf("writing a %s needs the register's current %d bytes, got %d", d.field.name, d.width, len(current))
		}
		reg |= d.join(current) &^ d.place
	}
	return d.split(reg), nil
}

func (d *I2C) join(data []byte) uint64 {
	var u uint64
	for i := range data {
		c := data[i]
		if d.b.ByteOrder == manifest.LittleEndian {
			c = data[len(data)-1-i]
		}
		u = u<<8 | uint64(c)
	}
	return u
}

func (d *I2C) split(u uint64) []byte {
	out := make([]byte, d.width)
	for i := range out {
		c := byte(u >> (8 * (d.width - 1 - i)))
		if d.b.ByteOrder == manifest.LittleEndian {
			out[d.width-1-i] = c
		} else {
			out[i] = c
		}
	}
	return out
}

// DecodeI2C decodes a register read for b and c (see I2C.Decode).
func DecodeI2C(b *manifest.I2CBinding, c *manifest.Capability, data []byte) (any, string, error) {
	d, err := NewI2C(b, c)
	if err != nil {
		return nil, "", err
	}
	return d.Decode(data)
}

// EncodeI2C encodes v for b and c, merging into current when needed (see I2C.Encode).
func EncodeI2C(b *manifest.I2CBinding, c *manifest.Capability, v any, current []byte) ([]byte, error) {
	d, err := NewI2C(b, c)
	if err != nil {
		return nil, err
	}
	return d.Encode(v, current)
}
