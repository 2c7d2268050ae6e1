package manifest

import (
	"math"
	"testing"
)

func modbusCap(dt DataType, t ModbusType, scale, offset float64) *Capability {
	return &Capability{DataType: dt, Binding: Binding{Modbus: &ModbusBinding{DataType: t, Scale: scale, Offset: offset}}}
}

func i2cCap(b I2CBinding) *Capability {
	return &Capability{DataType: TypeFloat, Binding: Binding{I2C: &b}}
}

func TestEncoding(t *testing.T) {
	for _, tc := range []struct {
		name           string
		c              *Capability
		step, min, max float64
		text           string
	}{
		{"uint16 × 0.01", modbusCap(TypeFloat, MBUint16, 0.01, 0), 0.01, 0, 655.35, "uint16 × 0.01 holds 0..655.35"},
		{"unscaled (scale 0 is unset)", modbusCap(TypeInt, MBUint16, 0, 0), 1, 0, 65535, "uint16 holds 0..65535"},
		{"int16 × 0.1", modbusCap(TypeFloat, MBInt16, 0.1, 0), 0.1, -3276.8, 3276.7, "int16 × 0.1 holds -3276.8..3276.7"},
		{"negative scale turns round", modbusCap(TypeFloat, MBInt16, -0.5, 10), 0.5, -16373.5, 16394, "int16 × -0.5 + 10 holds -16373.5..16394"},
		{"int32 with offset", modbusCap(TypeFloat, MBInt32, 1, -273.15), 1, -2147483921.15, 2147483373.85, ""},
		{"uint32 × 0.001", modbusCap(TypeFloat, MBUint32, 0.001, 0), 0.001, 0, 4294967.295, ""},
		// 2^64−1 has no float64; the greatest one the register takes is below it.
		{"uint64", modbusCap(TypeFloat, MBUint64, 1, 0), 1, 0, math.Nextafter(1<<64, 0), ""},
		// -2^63 is a float64, but its shortest decimal (-9.223372036854776e18) is below it.
		{"int64", modbusCap(TypeInt, MBInt64, 1, 0), 1, math.Nextafter(-1<<63, 0), math.Nextafter(1<<63, 0), ""},
		{"float32 is continuous", modbusCap(TypeFloat, MBFloat32, 1, 0), 0, -math.MaxFloat32, math.MaxFloat32, ""},
		{"float32 × 10", modbusCap(TypeFloat, MBFloat32, 10, 0), 0, -10 * float64(math.MaxFloat32), 10 * float64(math.MaxFloat32), ""},
		{"float64 × 10 stays finite", modbusCap(TypeFloat, MBFloat64, 10, 0), 0, -math.MaxFloat64, math.MaxFloat64, ""},
		{"i2c signed 12 bits above shift 4", i2cCap(I2CBinding{Width: 2, Signed: true, Shift: 4, Scale: 0.0625}), 0.0625, -128, 127.9375, "signed 12-bit I2C field × 0.0625 holds -128..127.9375"},
		{"i2c masked field", i2cCap(I2CBinding{Width: 2, Mask: 0x0ff0, Shift: 4, Scale: 1}), 1, 0, 255, "unsigned 8-bit I2C field holds 0..255"},
		{"i2c byte, width unset", i2cCap(I2CBinding{Scale: 0.5, Offset: -40}), 0.5, -40, 87.5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := tc.c.Encoding()
			if !ok {
				t.Fatal("no encoding")
			}
			if e.Step != tc.step || e.Min != tc.min || e.Max != tc.max {
				t.Errorf("step %g, %g..%g; want step %g, %g..%g", e.Step, e.Min, e.Max, tc.step, tc.min, tc.max)
			}
			if tc.text != "" && e.String() != tc.text {
				t.Errorf("String() = %q, want %q", e, tc.text)
			}
			for _, bound := range []float64{e.Min, e.Max} {
				if _, ok := e.Quantize(bound); !ok {
					t.Errorf("Quantize(%g) refused a bound of the encoding", bound)
				}
			}
		})
	}
}

func TestEncodingNone(t *testing.T) {
	for _, c := range []*Capability{
		{DataType: TypeBool, Binding: Binding{GPIO: &GPIOBinding{}}},
		modbusCap(TypeBool, MBBool, 1, 0),
		modbusCap(TypeEnum, MBUint16, 1, 0),
		{DataType: TypeString, Binding: Binding{Modbus: &ModbusBinding{DataType: MBString, Length: 4}}},
		{DataType: TypeFloat}, // binding not resolved
	} {
		if e, ok := c.Encoding(); ok {
			t.Errorf("%s on %+v: got %v, want none", c.DataType, c.Binding, e)
		}
	}
}

func TestQuantize(t *testing.T) {
	tenths, _ := modbusCap(TypeFloat, MBInt16, 0.1, 0).Encoding()
	tens, _ := modbusCap(TypeFloat, MBUint16, 10, 0).Encoding()
	negative, _ := modbusCap(TypeFloat, MBInt16, -0.5, 10).Encoding()
	float, _ := modbusCap(TypeFloat, MBFloat32, 1, 0).Encoding()
	for _, tc := range []struct {
		name string
		e    Encoding
		v, q float64
		ok   bool
	}{
		{"on the grid, exactly (25.5/0.1 is 254.99… in float64)", tenths, 25.5, 25.5, true},
		{"tie rounds away from zero", tenths, 12.35, 12.4, true},
		{"negative tie rounds away from zero", tenths, -12.35, -12.4, true},
		{"below a tie", tenths, 12.349, 12.3, true},
		{"max", tenths, 3276.7, 3276.7, true},
		{"just above max rounds onto it", tenths, 3276.74, 3276.7, true},
		{"half a step above max does not fit", tenths, 3276.75, 0, false},
		{"half a step below min does not fit", tenths, -3276.85, 0, false},
		{"coarse grid", tens, 15, 20, true},
		{"coarse grid below the tie", tens, 14.9, 10, true},
		{"negative scale: raw -1.5 rounds to -2", negative, 10.75, 11, true},
		{"float register keeps the value", float, 12.345678, 12.345678, true},
		{"beyond float32", float, 1e39, 0, false},
		{"NaN", tenths, math.NaN(), 0, false},
		{"infinity", float, math.Inf(1), 0, false},
	} {
		q, ok := tc.e.Quantize(tc.v)
		if q != tc.q || ok != tc.ok {
			t.Errorf("%s: Quantize(%g) = %g, %v; want %g, %v", tc.name, tc.v, q, ok, tc.q, tc.ok)
		}
	}
}

func TestWithin(t *testing.T) {
	tens, _ := modbusCap(TypeFloat, MBUint16, 10, 0).Encoding()
	tenths, _ := modbusCap(TypeFloat, MBUint16, 0.1, 0).Encoding()
	negative, _ := modbusCap(TypeFloat, MBInt16, -0.5, 10).Encoding()
	float, _ := modbusCap(TypeFloat, MBFloat32, 1, 0).Encoding()
	for _, tc := range []struct {
		name           string
		e              Encoding
		lo, hi         float64
		wantLo, wantHi float64
		ok             bool
	}{
		{"on the grid", tens, 0, 100, 0, 100, true},
		{"bounds move inwards", tens, 5, 15, 10, 10, true},
		{"nothing in between", tens, 1, 9, 0, 0, false},
		{"exact decimals", tenths, 0.3, 25.5, 0.3, 25.5, true},
		{"between tenths", tenths, 0.25, 99.95, 0.3, 99.9, true},
		{"clipped to what the register holds", tenths, -5, 1e6, 0, 6553.5, true},
		{"negative scale", negative, 0.2, 1.2, 0.5, 1, true},
		{"float register", float, -1.5, 2.5, -1.5, 2.5, true},
		{"outside entirely", tenths, -9, -1, 0, 0, false},
		{"lo above hi", tens, 20, 10, 0, 0, false},
	} {
		lo, hi, ok := tc.e.Within(tc.lo, tc.hi)
		if lo != tc.wantLo || hi != tc.wantHi || ok != tc.ok {
			t.Errorf("%s: Within(%g, %g) = %g, %g, %v; want %g, %g, %v", tc.name, tc.lo, tc.hi, lo, hi, ok, tc.wantLo, tc.wantHi, tc.ok)
		}
	}
}
