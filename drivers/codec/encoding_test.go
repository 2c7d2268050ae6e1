package codec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

// roundTrip encodes v as the codec would write it and decodes what was
// written, as a read would see it.
type roundTrip func(v float64) (float64, error)

func modbusTrip(t *testing.T, b *manifest.ModbusBinding, c *manifest.Capability) roundTrip {
	m, err := NewModbus(b, c)
	if err != nil {
		t.Fatal(err)
	}
	return func(v float64) (float64, error) {
		regs, err := m.Encode(v)
		if err != nil {
			return 0, err
		}
		x, flag, err := m.Decode(regs)
		if err != nil || flag != "" {
			t.Fatalf("decoding %04x (written for %g): %v %s", regs, v, err, flag)
		}
		return x.(float64), nil
	}
}

func i2cTrip(t *testing.T, b *manifest.I2CBinding, c *manifest.Capability) roundTrip {
	d, err := NewI2C(b, c)
	if err != nil {
		t.Fatal(err)
	}
	return func(v float64) (float64, error) {
		data, err := d.Encode(v, make([]byte, d.Width()))
		if err != nil {
			return 0, err
		}
		x, flag, err := d.Decode(data)
		if err != nil || flag != "" {
			t.Fatalf("decoding %x (written for %g): %v %s", data, v, err, flag)
		}
		return x.(float64), nil
	}
}

// TestEncodingMatchesCodec holds manifest.Encoding, which validate and the
// engine rely on, to what the codec really does: at and around Min and Max,
// on ties and at random, a value fits exactly when the codec writes it, and
// Quantize is what a read of the written value returns.
func TestEncodingMatchesCodec(t *testing.T) {
	type binding struct {
		name   string
		modbus *manifest.ModbusBinding
		i2c    *manifest.I2CBinding
	}
	var bindings []binding
	for _, dt := range []manifest.ModbusType{manifest.MBInt16, manifest.MBUint16, manifest.MBInt32, manifest.MBUint32, manifest.MBInt64, manifest.MBUint64, manifest.MBFloat32, manifest.MBFloat64} {
		for _, so := range [][2]float64{{1, 0}, {0.1, 0}, {0.01, -40}, {10, 0}, {-0.5, 273.15}, {0.0625, 0}, {1e-9, 0}} {
			b := holding(dt, manifest.BigEndian, manifest.BigEndian)
			b.Scale, b.Offset = so[0], so[1]
			bindings = append(bindings, binding{name: fmt.Sprintf("%s×%g+%g", dt, so[0], so[1]), modbus: b})
		}
	}
	for _, b := range []manifest.I2CBinding{
		{Width: 1, Scale: 1},
		{Width: 1, Signed: true, Scale: 0.5, Offset: -40},
		{Width: 2, ByteOrder: manifest.BigEndian, Signed: true, Shift: 4, Scale: 0.0625},
		{Width: 2, ByteOrder: manifest.LittleEndian, Mask: 0x0ff0, Shift: 4, Scale: 0.1},
		{Width: 3, ByteOrder: manifest.BigEndian, Signed: true, Mask: 0x3ffffc, Shift: 2, Scale: -0.01, Offset: 5},
		{Width: 4, ByteOrder: manifest.BigEndian, Scale: 0.001},
		{Width: 4, ByteOrder: manifest.BigEndian, Signed: true, Scale: 1},
	} {
		bindings = append(bindings, binding{name: fmt.Sprintf("i2c %+v", b), i2c: &b})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bc := range bindings {
		t.Run(bc.name, func(t *testing.T) {
			c := capOf(manifest.TypeFloat)
			var trip roundTrip
			if bc.modbus != nil {
				c.Binding.Modbus = bc.modbus
				trip = modbusTrip(t, bc.modbus, c)
			} else {
				c.Binding.I2C = bc.i2c
				trip = i2cTrip(t, bc.i2c, c)
			}
			e, ok := c.Encoding()
			if !ok {
				t.Fatal("no encoding")
			}
			probes := []float64{0, e.Min, e.Max, math.Nextafter(e.Min, math.Inf(-1)), math.Nextafter(e.Max, math.Inf(1))}
			for _, d := range []float64{e.Step / 2, e.Step, e.Step * 0.4999, e.Step * 0.5001} {
				probes = append(probes, e.Min-d, e.Min+d, e.Max-d, e.Max+d)
			}
			for range 200 {
				x := e.Min + rng.Float64()*(e.Max-e.Min)
				probes = append(probes, x)
				if e.Step > 0 {
					// a tie between two steps (as near as float64 gets)
					q, _ := e.Quantize(x)
					probes = append(probes, q+e.Step/2, q-e.Step/2)
				}
			}
			for _, v := range probes {
				q, fits := e.Quantize(v)
				got, err := trip(v)
				if fits != (err == nil) {
					t.Fatalf("%s: Quantize(%v) fits = %v, but the codec says %v", e, v, fits, err)
				}
				if !fits {
					continue
				}
				if !close(got, q, e) {
					t.Fatalf("%s: Quantize(%v) = %v, but the codec writes and reads back %v", e, v, q, got)
				}
			}
			// Min and Max are in the encoding, and nothing past them is.
			for _, bound := range []float64{e.Min, e.Max} {
				if got, err := trip(bound); err != nil || !close(got, bound, e) {
					t.Errorf("%s: bound %v reads back as %v, %v", e, bound, got, err)
				}
			}
			if e.Step > 0 && exactRaws(e) {
				for _, past := range []float64{e.Min - e.Step, e.Max + e.Step} {
					if _, err := trip(past); err == nil {
						t.Errorf("%s: %v, a step past the bounds, was written", e, past)
					}
				}
			}
		})
	}
}

// close compares a read-back value with the expected one: exactly for integer
// layouts whose raws are exact in float64; within a few ulps for 64-bit
// registers with raws beyond 2^53, which the codec scales in float64; for float
// registers within one float32 ulp (2^-23 relative), as a float32 keeps about 7
// significant digits and a float64 register is at least as precise.
func close(got, want float64, e manifest.Encoding) bool {
	if got == want {
		return true
	}
	if e.Step == 0 {
		return math.Abs(got-want) <= math.Abs(want)*0x1p-23
	}
	ulp := math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want)
	return !exactRaws(e) && math.Abs(got-want) <= 4*ulp
}

// exactRaws reports whether every raw of an integer layout is exact in float64
// (with room to spare below 2^53), so that no step is lost in rounding.
func exactRaws(e manifest.Encoding) bool {
	return math.Max(math.Abs(e.Min), math.Abs(e.Max))/e.Step < 1<<50
}
