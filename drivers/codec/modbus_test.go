package codec

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

func capOf(dt manifest.DataType, enum ...string) *manifest.Capability {
	return &manifest.Capability{Name: "x", Kind: manifest.KindDo, DataType: dt, EnumValues: enum}
}

func holding(t manifest.ModbusType, byteOrder, wordOrder manifest.ByteOrder) *manifest.ModbusBinding {
	return &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, DataType: t, ByteOrder: byteOrder, WordOrder: wordOrder}
}

var orders = []struct {
	name        string
	byteO, word manifest.ByteOrder
}{
	{"ABCD", manifest.BigEndian, manifest.BigEndian},
	{"CDAB", manifest.BigEndian, manifest.LittleEndian},
	{"BADC", manifest.LittleEndian, manifest.BigEndian},
	{"DCBA", manifest.LittleEndian, manifest.LittleEndian},
}

// The canonical float32 1.0 = 0x3F800000 and a 32-bit pattern with four distinct bytes.
func TestModbusOrderTable(t *testing.T) {
	want := map[string][]uint16{
		"ABCD": {0x0102, 0x0304},
		"CDAB": {0x0304, 0x0102},
		"BADC": {0x0201, 0x0403},
		"DCBA": {0x0403, 0x0201},
	}
	for _, o := range orders {
		b := holding(manifest.MBUint32, o.byteO, o.word)
		regs, err := EncodeRegisters(b, capOf(manifest.TypeInt), 0x01020304)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(regs, want[o.name]) {
			t.Errorf("%s: uint32 0x01020304 → %04x, want %04x", o.name, regs, want[o.name])
		}
		v, _, err := DecodeRegisters(b, capOf(manifest.TypeInt), want[o.name])
		if err != nil || v != int64(0x01020304) {
			t.Errorf("%s: decode %04x = %v, %v", o.name, want[o.name], v, err)
		}
	}
	// 64-bit: bytes 01..08
	want64 := map[string][]uint16{
		"ABCD": {0x0102, 0x0304, 0x0506, 0x0708},
		"CDAB": {0x0708, 0x0506, 0x0304, 0x0102},
		"BADC": {0x0201, 0x0403, 0x0605, 0x0807},
		"DCBA": {0x0807, 0x0605, 0x0403, 0x0201},
	}
	for _, o := range orders {
		b := holding(manifest.MBUint64, o.byteO, o.word)
		regs, err := EncodeRegisters(b, capOf(manifest.TypeInt), uint64(0x0102030405060708))
		if err != nil || !reflect.DeepEqual(regs, want64[o.name]) {
			t.Errorf("%s: uint64 → %04x (%v), want %04x", o.name, regs, err, want64[o.name])
		}
	}
	// float32 1.0 in ABCD is 3F80 0000
	regs, err := EncodeRegisters(holding(manifest.MBFloat32, "big", "big"), capOf(manifest.TypeFloat), 1.0)
	if err != nil || !reflect.DeepEqual(regs, []uint16{0x3F80, 0}) {
		t.Errorf("float32 1.0 ABCD = %04x, %v", regs, err)
	}
}

// Every register type round-trips its boundary values through all four orders.
func TestModbusRoundTrip(t *testing.T) {
	cases := []struct {
		typ  manifest.ModbusType
		dt   manifest.DataType
		vals []any
	}{
		{manifest.MBInt16, manifest.TypeInt, []any{int64(math.MinInt16), int64(-1), int64(0), int64(1), int64(math.MaxInt16)}},
		{manifest.MBUint16, manifest.TypeInt, []any{int64(0), int64(1), int64(math.MaxUint16)}},
		{manifest.MBInt32, manifest.TypeInt, []any{int64(math.MinInt32), int64(-2), int64(0), int64(math.MaxInt32)}},
		{manifest.MBUint32, manifest.TypeInt, []any{int64(0), int64(math.MaxUint32)}},
		{manifest.MBInt64, manifest.TypeInt, []any{int64(math.MinInt64), int64(-1), int64(0), int64(math.MaxInt64)}},
		{manifest.MBUint64, manifest.TypeInt, []any{int64(0), int64(math.MaxInt64)}},
		{manifest.MBFloat32, manifest.TypeFloat, []any{0.0, math.Copysign(0, -1), 1.5, -21.25, 230.1, float64(math.SmallestNonzeroFloat32), float64(math.MaxFloat32), -float64(math.MaxFloat32)}},
		{manifest.MBFloat64, manifest.TypeFloat, []any{0.0, math.Copysign(0, -1), 0.1, -1e300, math.MaxFloat64, math.SmallestNonzeroFloat64}},
		{manifest.MBInt16, manifest.TypeFloat, []any{-32768.0, 32767.0}},
		{manifest.MBUint16, manifest.TypeBool, []any{true, false}},
		{manifest.MBUint16, manifest.TypeEnum, []any{"off", "low", "high"}},
	}
	for _, tc := range cases {
		for _, o := range orders {
			b := holding(tc.typ, o.byteO, o.word)
			c := capOf(tc.dt, "off", "low", "high")
			for _, v := range tc.vals {
				regs, err := EncodeRegisters(b, c, v)
				if err != nil {
					t.Errorf("%s %s encode %v: %v", tc.typ, o.name, v, err)
					continue
				}
				if len(regs) != b.DataType.Registers(0) {
					t.Errorf("%s: %d registers", tc.typ, len(regs))
				}
				got, flag, err := DecodeRegisters(b, c, regs)
				if err != nil || flag != "" {
					t.Errorf("%s %s decode %04x: %v %q", tc.typ, o.name, regs, err, flag)
					continue
				}
				same := reflect.DeepEqual(got, v)
				if tc.typ == manifest.MBFloat32 {
					// reads give the shortest decimal naming the float32
					same = float32(got.(float64)) == float32(v.(float64))
				}
				if !same {
					t.Errorf("%s %s: %v → %04x → %v", tc.typ, o.name, v, regs, got)
				}
				if f, ok := v.(float64); ok && f == 0 && math.Signbit(f) != math.Signbit(got.(float64)) {
					t.Errorf("%s %s: sign of zero lost", tc.typ, o.name)
				}
			}
		}
	}
}

func TestModbusUint64Extremes(t *testing.T) {
	b := holding(manifest.MBUint64, "big", "big")
	regs, err := EncodeRegisters(b, capOf(manifest.TypeInt), uint64(math.MaxUint64))
	if err != nil || !reflect.DeepEqual(regs, []uint16{0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF}) {
		t.Fatalf("MaxUint64 → %04x, %v", regs, err)
	}
	// an int capability cannot carry it: flagged, not wrapped to -1
	v, flag, err := DecodeRegisters(b, capOf(manifest.TypeInt), regs)
	if err != nil || v != nil || !strings.Contains(flag, "18446744073709551615") {
		t.Errorf("MaxUint64 as int = %v %q %v", v, flag, err)
	}
	v, flag, err = DecodeRegisters(b, capOf(manifest.TypeFloat), regs)
	if err != nil || flag != "" || v != float64(math.MaxUint64) {
		t.Errorf("MaxUint64 as float = %v %q %v", v, flag, err)
	}
	// 2^64 as a float is one past the top: refused
	if _, err := EncodeRegisters(b, capOf(manifest.TypeFloat), float64(math.MaxUint64)); err == nil || !strings.Contains(err.Error(), "18446744073709551615") {
		t.Errorf("2^64 into uint64: %v", err)
	}
}

func TestModbusRangeErrors(t *testing.T) {
	cases := []struct {
		typ   manifest.ModbusType
		dt    manifest.DataType
		scale float64
		v     any
		want  string
	}{
		{manifest.MBInt16, manifest.TypeInt, 0, 32768.0, "does not fit int16 (-32768..32767)"},
		{manifest.MBInt16, manifest.TypeInt, 0, -32769, "does not fit int16"},
		{manifest.MBUint16, manifest.TypeInt, 0, -1, "does not fit uint16 (0..65535)"},
		{manifest.MBUint16, manifest.TypeFloat, 0.1, 6553.6, "6553.6 (raw 65536) does not fit uint16"},
		{manifest.MBInt32, manifest.TypeInt, 0, int64(math.MaxInt32) + 1, "does not fit int32"},
		{manifest.MBUint32, manifest.TypeInt, 0, uint64(math.MaxUint32) + 1, "does not fit uint32"},
		{manifest.MBInt64, manifest.TypeInt, 0, uint64(math.MaxInt64) + 1, "does not fit int64"},
		{manifest.MBUint64, manifest.TypeInt, 0, -1, "does not fit uint64"},
		{manifest.MBFloat32, manifest.TypeFloat, 0, 1e39, "beyond the float32 range"},
		{manifest.MBFloat32, manifest.TypeFloat, 0, math.NaN(), "not a finite number"},
		{manifest.MBFloat64, manifest.TypeFloat, 0, math.Inf(1), "not a finite number"},
		{manifest.MBInt16, manifest.TypeInt, 0, math.Inf(-1), "not a finite number"},
		{manifest.MBInt16, manifest.TypeInt, 0, 2.5, "not a whole number"},
		{manifest.MBInt16, manifest.TypeInt, 0, "3", "not a number"},
		{manifest.MBUint16, manifest.TypeBool, 0, 1, "not a bool"},
		{manifest.MBUint16, manifest.TypeEnum, 0, "medium", `"medium" is not one of the enum values ["off" "low" "high"]`},
		{manifest.MBUint16, manifest.TypeEnum, 0, 1.0, "not an enum name"},
	}
	for _, tc := range cases {
		b := holding(tc.typ, "big", "big")
		b.Scale = tc.scale
		_, err := EncodeRegisters(b, capOf(tc.dt, "off", "low", "high"), tc.v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: err %v, want %q", tc.typ, tc.v, err, tc.want)
		}
	}
	// 2.0 is a fine int
	if regs, err := EncodeRegisters(holding(manifest.MBInt16, "", ""), capOf(manifest.TypeInt), 2.0); err != nil || regs[0] != 2 {
		t.Errorf("2.0 → %v %v", regs, err)
	}
}

func TestModbusScaleRounding(t *testing.T) {
	cases := []struct {
		typ           manifest.ModbusType
		scale, offset float64
		v             any
		raw           uint16
	}{
		{manifest.MBUint16, 0.1, 0, 12.35, 124}, // 123.5 exactly: ties away from zero
		{manifest.MBUint16, 0.1, 0, 12.34, 123},
		{manifest.MBUint16, 0.1, 0, 12.36, 124},
		{manifest.MBInt16, 0.1, 0, -12.35, uint16(0x10000 - 124)}, // -123.5 → -124
		{manifest.MBInt16, 0.01, 0, 0.125, 13},
		{manifest.MBUint16, 0.5, -40, -40.25, 0}, // raw −0.5 rounds away to −1: refused, not written as 0
		{manifest.MBUint16, 10, 0, 15.0, 2},      // 1.5 → 2
		{manifest.MBUint16, 0.0625, 0, 25.0, 400},
		{manifest.MBUint16, 1, 1000, 1234.0, 234},
		{manifest.MBInt16, 0.1, -273.15, 21.85, 2950},
	}
	for i, tc := range cases {
		b := holding(tc.typ, "big", "big")
		b.Scale, b.Offset = tc.scale, tc.offset
		regs, err := EncodeRegisters(b, capOf(manifest.TypeFloat), tc.v)
		if i == 5 {
			if err == nil || !strings.Contains(err.Error(), "raw -1") {
				t.Errorf("−0.5 raw must round to −1 and be refused: %v %v", regs, err)
			}
			continue
		}
		if err != nil || regs[0] != tc.raw {
			t.Errorf("%v scale %v offset %v → %v %v, want %d", tc.v, tc.scale, tc.offset, regs, err, tc.raw)
		}
	}
}

func TestModbusScaledRead(t *testing.T) {
	cases := []struct {
		typ           manifest.ModbusType
		dt            manifest.DataType
		scale, offset float64
		regs          []uint16
		want          any
	}{
		{manifest.MBUint16, manifest.TypeFloat, 0.1, 0, []uint16{3}, 0.3},
		{manifest.MBUint16, manifest.TypeFloat, 0.1, 0, []uint16{2345}, 234.5},
		{manifest.MBInt16, manifest.TypeFloat, 0.1, -273.15, []uint16{2950}, 21.85},
		{manifest.MBInt16, manifest.TypeFloat, 0.01, 0, []uint16{0xFFFF}, -0.01},
		{manifest.MBUint16, manifest.TypeInt, 0.1, 0, []uint16{125}, int64(13)}, // 12.5 → 13
		{manifest.MBInt16, manifest.TypeInt, 0.1, 0, []uint16{0x10000 - 125}, int64(-13)},
		{manifest.MBFloat32, manifest.TypeFloat, 0.1, 0, []uint16{0x4120, 0}, 1.0}, // 10.0f × 0.1
		{manifest.MBFloat32, manifest.TypeInt, 1, 0, []uint16{0x4120, 0x0000}, int64(10)},
		{manifest.MBFloat32, manifest.TypeFloat, 0, 0, []uint16{0x4366, 0x199A}, 230.1},
		{manifest.MBUint32, manifest.TypeFloat, 0.001, 0, []uint16{0x0001, 0x0000}, 65.536},
	}
	for _, tc := range cases {
		b := holding(tc.typ, "big", "big")
		b.Scale, b.Offset = tc.scale, tc.offset
		v, flag, err := DecodeRegisters(b, capOf(tc.dt), tc.regs)
		if err != nil || flag != "" || v != tc.want {
			t.Errorf("%s %04x scale %v offset %v → %v %q %v, want %v", tc.typ, tc.regs, tc.scale, tc.offset, v, flag, err, tc.want)
		}
	}
}

func TestModbusFlags(t *testing.T) {
	nan32 := math.Float32bits(float32(math.NaN()))
	cases := []struct {
		typ  manifest.ModbusType
		dt   manifest.DataType
		regs []uint16
		want string
	}{
		{manifest.MBFloat32, manifest.TypeFloat, []uint16{uint16(nan32 >> 16), uint16(nan32)}, "device returned NaN"},
		{manifest.MBFloat32, manifest.TypeFloat, []uint16{0x7F80, 0}, "device returned +Inf"},
		{manifest.MBFloat32, manifest.TypeInt, []uint16{0xFF80, 0}, "device returned -Inf"},
		{manifest.MBFloat64, manifest.TypeFloat, []uint16{0x7FF8, 0, 0, 1}, "device returned NaN"},
		{manifest.MBUint16, manifest.TypeEnum, []uint16{3}, "enum index 3 has no name"},
		{manifest.MBInt16, manifest.TypeEnum, []uint16{0xFFFF}, "enum index -1 has no name"},
		{manifest.MBFloat64, manifest.TypeInt, []uint16{0x47EF, 0xFFFF, 0xFFFF, 0xFFFF}, "does not fit a 64-bit signed int"},
	}
	for _, tc := range cases {
		v, flag, err := DecodeRegisters(holding(tc.typ, "big", "big"), capOf(tc.dt, "a", "b", "c"), tc.regs)
		if err != nil || v != nil || !strings.Contains(flag, tc.want) {
			t.Errorf("%s %04x → %v %q %v, want flag %q", tc.typ, tc.regs, v, flag, err, tc.want)
		}
	}
}

func TestModbusStrings(t *testing.T) {
	c := capOf(manifest.TypeString)
	for _, o := range []manifest.ByteOrder{"", manifest.BigEndian, manifest.LittleEndian} {
		b := &manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBString, Length: 4, ByteOrder: o}
		for _, s := range []string{"", "A", "AB", "ABC", "SN-12345"} {
			regs, err := EncodeRegisters(b, c, s)
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			got, flag, err := DecodeRegisters(b, c, regs)
			if err != nil || flag != "" || got != s {
				t.Errorf("order %q: %q → %04x → %q %q %v", o, s, regs, got, flag, err)
			}
		}
	}
	b := &manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBString, Length: 2}
	if regs, _ := EncodeRegisters(b, c, "ABC"); !reflect.DeepEqual(regs, []uint16{0x4142, 0x4300}) {
		t.Errorf("big order ABC = %04x", regs)
	}
	b.ByteOrder = manifest.LittleEndian
	if regs, _ := EncodeRegisters(b, c, "ABC"); !reflect.DeepEqual(regs, []uint16{0x4241, 0x0043}) {
		t.Errorf("little order ABC = %04x", regs)
	}
	b.ByteOrder = ""
	if v, _, _ := DecodeRegisters(b, c, []uint16{0x4142, 0x2020}); v != "AB" {
		t.Errorf("trailing spaces not trimmed: %q", v)
	}
	if _, err := EncodeRegisters(b, c, "ABCDE"); err == nil || !strings.Contains(err.Error(), "at most 4") {
		t.Errorf("too long: %v", err)
	}
	if _, err := EncodeRegisters(b, c, "Ä"); err == nil || !strings.Contains(err.Error(), "not printable ASCII") {
		t.Errorf("non-ASCII: %v", err)
	}
	if v, flag, err := DecodeRegisters(b, c, []uint16{0x41C3, 0x0000}); v != nil || !strings.Contains(flag, "0xc3") || err != nil {
		t.Errorf("non-ASCII read: %v %q %v", v, flag, err)
	}
}

func TestModbusBits(t *testing.T) {
	coil := &manifest.ModbusBinding{Table: manifest.TableCoil, DataType: manifest.MBBool}
	for _, v := range []bool{true, false} {
		bits, err := EncodeBits(coil, capOf(manifest.TypeBool), v)
		if err != nil || bits[0] != v {
			t.Errorf("coil %v → %v %v", v, bits, err)
		}
		got, _, err := DecodeBits(coil, capOf(manifest.TypeBool), bits)
		if err != nil || got != v {
			t.Errorf("coil %v → %v %v", v, got, err)
		}
	}
	if got, _, _ := DecodeBits(coil, capOf(manifest.TypeEnum, "closed", "open"), []bool{true}); got != "open" {
		t.Errorf("enum coil = %v", got)
	}
	if _, err := EncodeBits(coil, capOf(manifest.TypeInt), 2); err == nil || !strings.Contains(err.Error(), "does not fit bool (0..1)") {
		t.Errorf("2 into a coil: %v", err)
	}
	if _, err := EncodeRegisters(coil, capOf(manifest.TypeBool), true); err == nil {
		t.Error("EncodeRegisters on a coil must fail")
	}

	bit := &manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBBit, Bit: 5}
	c := capOf(manifest.TypeBool)
	reg, err := EncodeBit(bit, c, true, 0xA50F)
	if err != nil || reg != 0xA52F {
		t.Errorf("set bit 5 of a50f = %04x %v", reg, err)
	}
	reg, err = EncodeBit(bit, c, false, 0xFFFF)
	if err != nil || reg != 0xFFDF {
		t.Errorf("clear bit 5 of ffff = %04x %v", reg, err)
	}
	if v, _, _ := DecodeRegisters(bit, c, []uint16{0x0020}); v != true {
		t.Errorf("bit 5 of 0020 = %v", v)
	}
	if v, _, _ := DecodeRegisters(bit, c, []uint16{0xFFDF}); v != false {
		t.Errorf("bit 5 of ffdf = %v", v)
	}
	if _, err := EncodeRegisters(bit, c, true); err == nil {
		t.Error("EncodeRegisters on a bit must ask for EncodeBit")
	}
}

func TestModbusBindingChecks(t *testing.T) {
	cases := []struct {
		b    manifest.ModbusBinding
		dt   manifest.DataType
		want string
	}{
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBFloat32, ByteOrder: "big"}, manifest.TypeFloat, "explicit byte_order and word_order"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBInt16, ByteOrder: "middle"}, manifest.TypeInt, `"middle" is neither big nor little`},
		{manifest.ModbusBinding{Table: manifest.TableCoil, DataType: manifest.MBInt16}, manifest.TypeInt, "data type must be bool"},
		{manifest.ModbusBinding{Table: manifest.TableInput, DataType: manifest.MBBool}, manifest.TypeBool, "use type bit"},
		{manifest.ModbusBinding{Table: "eeprom", DataType: manifest.MBInt16}, manifest.TypeInt, "unknown table"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBBit, Bit: 16}, manifest.TypeBool, "bit 16 is outside 0..15"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBString}, manifest.TypeString, "string length 0"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBString, Length: 2}, manifest.TypeFloat, "carries data_type string"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBUint16}, manifest.TypeString, "needs a string register"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBFloat32, ByteOrder: "big", WordOrder: "big"}, manifest.TypeBool, "carries data_type float or int"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBUint16, Scale: 2}, manifest.TypeBool, "bool capability cannot be scaled"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBUint16}, manifest.TypeEnum, "no enum_values"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: manifest.MBUint16, Scale: math.NaN()}, manifest.TypeFloat, "must be finite"},
		{manifest.ModbusBinding{Table: manifest.TableHolding, DataType: "int24"}, manifest.TypeInt, "unknown modbus data type"},
	}
	for _, tc := range cases {
		_, err := NewModbus(&tc.b, capOf(tc.dt))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %s: %v, want %q", tc.b, tc.dt, err, tc.want)
		}
	}
}

func TestNumberInputs(t *testing.T) {
	b := holding(manifest.MBInt32, "big", "big")
	c := capOf(manifest.TypeInt)
	for _, v := range []any{int(7), int8(7), int16(7), int32(7), int64(7), uint(7), uint8(7), uint16(7), uint32(7), uint64(7), float32(7), 7.0, json.Number("7")} {
		regs, err := EncodeRegisters(b, c, v)
		if err != nil || !reflect.DeepEqual(regs, []uint16{0, 7}) {
			t.Errorf("%T 7 → %v %v", v, regs, err)
		}
	}
	if _, err := EncodeRegisters(b, c, json.Number("1e999")); err == nil {
		t.Error("json 1e999 accepted")
	}
}

func TestBool(t *testing.T) {
	for _, tc := range []struct {
		c    *manifest.Capability
		in   any
		want bool
	}{
		{capOf(manifest.TypeBool), true, true},
		{capOf(manifest.TypeInt), 0.0, false},
		{capOf(manifest.TypeEnum, "off", "on"), "on", true},
	} {
		l, err := EncodeBool(tc.c, tc.in)
		if err != nil || l != tc.want {
			t.Errorf("%v → %v %v", tc.in, l, err)
		}
		back, _, _ := DecodeBool(tc.c, l)
		if back != tc.in && !(tc.c.DataType == manifest.TypeInt && back == int64(0)) {
			t.Errorf("%v → %v → %v", tc.in, l, back)
		}
	}
	if _, err := NewBool(capOf(manifest.TypeString)); err == nil {
		t.Error("string on a line accepted")
	}
}

func FuzzDecodeRegisters(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte{0x19, 0x00, 0x7f, 0xc0, 0, 0, 0, 0}, 0.1, -5.0)
	f.Add(uint8(7), uint8(3), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0.0, 0.0)
	types := []manifest.ModbusType{manifest.MBBit, manifest.MBInt16, manifest.MBUint16, manifest.MBInt32, manifest.MBUint32,
		manifest.MBInt64, manifest.MBUint64, manifest.MBFloat32, manifest.MBFloat64, manifest.MBString}
	dts := []manifest.DataType{manifest.TypeFloat, manifest.TypeInt, manifest.TypeBool, manifest.TypeEnum, manifest.TypeString}
	f.Fuzz(func(t *testing.T, ti, oi uint8, data []byte, scale, offset float64) {
		typ := types[int(ti)%len(types)]
		dt := dts[int(ti/16)%len(dts)]
		o := orders[int(oi)%len(orders)]
		b := &manifest.ModbusBinding{Table: manifest.TableHolding, DataType: typ, ByteOrder: o.byteO, WordOrder: o.word,
			Length: 1 + int(oi)%8, Bit: int(oi) % 16, Scale: scale, Offset: offset}
		m, err := NewModbus(b, capOf(dt, "a", "b"))
		if err != nil {
			return
		}
		regs := make([]uint16, m.Count())
		for i := range regs {
			if 2*i+1 < len(data) {
				regs[i] = uint16(data[2*i])<<8 | uint16(data[2*i+1])
			}
		}
		v, flag, err := m.Decode(regs)
		if err != nil {
			t.Fatalf("decode error on a valid binding: %v", err)
		}
		if (v == nil) == (flag == "") {
			t.Fatalf("value %v with flag %q", v, flag)
		}
		if v != nil {
			// whatever was read writes back to the same registers (scale 1 only: scaling may be lossy)
			if b.Scale != 0 && b.Scale != 1 || b.Offset != 0 || typ == manifest.MBBit {
				return
			}
			if dt == manifest.TypeFloat && (typ == manifest.MBInt64 || typ == manifest.MBUint64) {
				return // a float64 cannot hold every 64-bit integer
			}
			back, err := m.Encode(v)
			if err != nil {
				t.Fatalf("%v read from %04x does not encode: %v", v, regs, err)
			}
			again, _, _ := m.Decode(back)
			if !reflect.DeepEqual(again, v) {
				t.Fatalf("%04x → %v → %04x → %v", regs, v, back, again)
			}
		}
	})
}
