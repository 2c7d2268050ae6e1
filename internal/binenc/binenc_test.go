package binenc

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// Varints read back what binary's append functions wrote, and a truncated
// one fails the decoder, stays failed, and reads as zero from then on.
func TestVarints(t *testing.T) {
	us := []uint64{0, 1, 127, 128, 1 << 35, math.MaxUint64}
	is := []int64{0, -1, 1, -64, 64, math.MinInt64, math.MaxInt64}
	var b []byte
	for i, u := range us {
		b = binary.AppendUvarint(b, u)
		b = binary.AppendVarint(b, is[i])
	}
	d := Decoder{B: b}
	for i, u := range us {
		if got := d.Uvarint(); got != u {
			t.Errorf("Uvarint %d: %d, want %d", i, got, u)
		}
		if got := d.Varint(); got != is[i] {
			t.Errorf("Varint %d: %d, want %d", i, got, is[i])
		}
	}
	if err := d.Done(); err != nil {
		t.Fatal(err)
	}

	for _, read := range []func(*Decoder) any{
		func(d *Decoder) any { return d.Uvarint() },
		func(d *Decoder) any { return d.Varint() },
	} {
		long := binary.AppendUvarint(nil, 1<<40)
		d := Decoder{B: append([]byte{0x05}, long[:len(long)-1]...)} // 5, then a varint cut short
		if got := read(&d); got != uint64(5) && got != int64(-3) {
			t.Fatalf("first: %v", got)
		}
		if got := read(&d); !errors.Is(d.Err(), ErrTruncated) || (got != uint64(0) && got != int64(0)) || d.Off != len(d.B) {
			t.Fatalf("cut short: %v, err %v, offset %d of %d", got, d.Err(), d.Off, len(d.B))
		}
		d.B = append(d.B, 0x01) // more bytes do not undo the failure
		if got := read(&d); got != uint64(0) && got != int64(0) {
			t.Fatalf("after the failure: %v", got)
		}
	}
}

// BenchmarkDecodeRecord reads a record shaped like an idempotency outcome:
// strings, times, varints and values.
func BenchmarkDecodeRecord(b *testing.B) {
	var rec []byte
	rec = AppendString(rec, "do_heater_setpoint")
	rec = AppendTime(rec, time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.UTC))
	rec = binary.AppendUvarint(rec, 123456)
	rec = binary.AppendVarint(rec, -42)
	rec, _ = AppendValue(rec, 21.5)
	rec, _ = AppendValue(rec, "partial")
	rec = AppendStrings(rec, []string{"heater power draw changes", "air temperature changes"})
	rec = AppendTime(rec, time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC))
	b.ReportAllocs()
	for b.Loop() {
		d := Decoder{B: rec}
		_ = d.String()
		_ = d.Time()
		_ = d.Uvarint()
		_ = d.Varint()
		_ = d.Value()
		_ = d.Value()
		_ = d.Strings()
		_ = d.Time()
		if err := d.Done(); err != nil {
			b.Fatal(err)
		}
	}
}
