package codec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

func tmp102() *manifest.I2CBinding {
	return &manifest.I2CBinding{Address: 0x48, Register: 0, Width: 2, ByteOrder: manifest.BigEndian, Signed: true, Shift: 4, Scale: 0.0625}
}

func TestTMP102(t *testing.T) {
	c := capOf(manifest.TypeFloat)
	for _, tc := range []struct {
		data []byte
		want float64
	}{
		{[]byte{0x19, 0x00}, 25.0},
		{[]byte{0xE7, 0x00}, -25.0},
		{[]byte{0x7F, 0xF0}, 127.9375},
		{[]byte{0x80, 0x00}, -128},
		{[]byte{0x00, 0x10}, 0.0625},
		{[]byte{0xFF, 0xF0}, -0.0625},
		{[]byte{0x19, 0x0F}, 25.0}, // the low nibble is not part of the reading
	} {
		v, flag, err := DecodeI2C(tmp102(), c, tc.data)
		if err != nil || flag != "" || v != tc.want {
			t.Errorf("% x → %v %q %v, want %v", tc.data, v, flag, err, tc.want)
		}
	}
	// writing keeps the low nibble of the register as it was
	out, err := EncodeI2C(tmp102(), c, -25.0, []byte{0x00, 0x0A})
	if err != nil || !bytes.Equal(out, []byte{0xE7, 0x0A}) {
		t.Errorf("-25 → % x %v", out, err)
	}
	if _, err := EncodeI2C(tmp102(), c, 128.0, []byte{0, 0}); err == nil || !strings.Contains(err.Error(), "signed 12-bit field (-2048..2047)") {
		t.Errorf("128 °C: %v", err)
	}
	if _, err := EncodeI2C(tmp102(), c, 25.0, nil); err == nil || !strings.Contains(err.Error(), "current 2 bytes") {
		t.Errorf("no current: %v", err)
	}
}

func TestI2CLayouts(t *testing.T) {
	cases := []struct {
		name    string
		b       manifest.I2CBinding
		dt      manifest.DataType
		data    []byte
		want    any
		write   any
		current []byte
		wrote   []byte
	}{
		{"u8", manifest.I2CBinding{}, manifest.TypeInt, []byte{0xFE}, int64(254), int64(17), nil, []byte{17}},
		{"s8", manifest.I2CBinding{Signed: true}, manifest.TypeInt, []byte{0xFE}, int64(-2), int64(-128), nil, []byte{0x80}},
		{"u16 little", manifest.I2CBinding{Width: 2, ByteOrder: "little"}, manifest.TypeInt, []byte{0x34, 0x12}, int64(0x1234), int64(0xBEEF), nil, []byte{0xEF, 0xBE}},
		{"u24 big", manifest.I2CBinding{Width: 3, ByteOrder: "big"}, manifest.TypeInt, []byte{0x01, 0x02, 0x03}, int64(0x010203), int64(0xFFFFFF), nil, []byte{0xFF, 0xFF, 0xFF}},
		{"s32 little scaled", manifest.I2CBinding{Width: 4, ByteOrder: "little", Signed: true, Scale: 0.01}, manifest.TypeFloat,
			[]byte{0x9C, 0xFF, 0xFF, 0xFF}, -1.0, 21.5, nil, []byte{0x66, 0x08, 0, 0}},
		{"u32 max", manifest.I2CBinding{Width: 4, ByteOrder: "big"}, manifest.TypeInt, []byte{0xFF, 0xFF, 0xFF, 0xFF}, int64(0xFFFFFFFF), int64(0), nil, []byte{0, 0, 0, 0}},
		{"mask bits 2..4", manifest.I2CBinding{Mask: 0x1C, Shift: 2}, manifest.TypeInt, []byte{0xF4}, int64(5), int64(2), []byte{0xFF}, []byte{0xEB}},
		{"mask bit 7 bool", manifest.I2CBinding{Mask: 0x80, Shift: 7}, manifest.TypeBool, []byte{0x80}, true, false, []byte{0xFF}, []byte{0x7F}},
		{"mask enum", manifest.I2CBinding{Mask: 0x03}, manifest.TypeEnum, []byte{0xFE}, "fast", "off", []byte{0xAB}, []byte{0xA8}},
		{"signed masked", manifest.I2CBinding{Width: 2, ByteOrder: "big", Mask: 0x0FF0, Shift: 4, Signed: true}, manifest.TypeInt,
			[]byte{0xAF, 0xF5}, int64(-1), int64(-128), []byte{0xA0, 0x05}, []byte{0xA8, 0x05}},
	}
	for _, tc := range cases {
		c := capOf(tc.dt, "off", "slow", "fast")
		d, err := NewI2C(&tc.b, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		v, flag, err := d.Decode(tc.data)
		if err != nil || flag != "" || v != tc.want {
			t.Errorf("%s: % x → %v %q %v, want %v", tc.name, tc.data, v, flag, err, tc.want)
		}
		out, err := d.Encode(tc.write, tc.current)
		if err != nil || !bytes.Equal(out, tc.wrote) {
			t.Errorf("%s: write %v over % x → % x %v, want % x", tc.name, tc.write, tc.current, out, err, tc.wrote)
		}
		back, _, _ := d.Decode(out)
		if back != tc.write && !(tc.dt == manifest.TypeFloat && back == 21.5) {
			t.Errorf("%s: wrote %v, reads back %v", tc.name, tc.write, back)
		}
	}
}

func TestI2CChecks(t *testing.T) {
	cases := []struct {
		b    manifest.I2CBinding
		dt   manifest.DataType
		want string
	}{
		{manifest.I2CBinding{Width: 5, ByteOrder: "big"}, manifest.TypeInt, "width 5 bytes is outside 1..4"},
		{manifest.I2CBinding{Width: 2}, manifest.TypeInt, "needs an explicit byte_order"},
		{manifest.I2CBinding{Shift: 8}, manifest.TypeInt, "shift 8 leaves no bits"},
		{manifest.I2CBinding{Mask: 0x1FF}, manifest.TypeInt, "wider than the 8-bit register"},
		{manifest.I2CBinding{Mask: 0x05}, manifest.TypeInt, "not one contiguous field"},
		{manifest.I2CBinding{Mask: 0x0C, Shift: 1}, manifest.TypeInt, "not one contiguous field"},
		{manifest.I2CBinding{Mask: 0x01, Signed: true}, manifest.TypeInt, "at least 2 bits"},
		{manifest.I2CBinding{}, manifest.TypeString, "data_type string"},
		{manifest.I2CBinding{Scale: 2}, manifest.TypeEnum, "cannot be scaled"},
	}
	for _, tc := range cases {
		_, err := NewI2C(&tc.b, capOf(tc.dt, "a"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.b, err, tc.want)
		}
	}
	d, _ := NewI2C(&manifest.I2CBinding{}, capOf(manifest.TypeInt))
	if d.NeedsCurrent() {
		t.Error("a whole byte needs no read-modify-write")
	}
	if _, err := d.Encode(256, nil); err == nil || !strings.Contains(err.Error(), "value 256 does not fit unsigned 8-bit field (0..255)") {
		t.Errorf("256: %v", err)
	}
}

func FuzzDecodeI2C(f *testing.F) {
	f.Add(uint8(2), true, uint8(4), uint64(0), []byte{0x19, 0x00})
	f.Add(uint8(1), false, uint8(2), uint64(0x1c), []byte{0xff})
	f.Fuzz(func(t *testing.T, width uint8, signed bool, shift uint8, mask uint64, data []byte) {
		b := &manifest.I2CBinding{Width: int(width % 6), ByteOrder: manifest.LittleEndian, Signed: signed, Shift: uint(shift % 40), Mask: mask, Scale: 0.5}
		d, err := NewI2C(b, capOf(manifest.TypeFloat))
		if err != nil {
			return
		}
		buf := make([]byte, d.Width())
		copy(buf, data)
		v, _, err := d.Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.Encode(v, buf)
		if err != nil || !bytes.Equal(out, buf) {
			t.Fatalf("% x → %v → % x %v", buf, v, out, err)
		}
	})
}
