package codec

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/physmcp/physmcpd/internal/allocs"
	"github.com/physmcp/physmcpd/manifest"
)

// pattern takes an int64 path for values that fit; at and around each
// type's limits it must give what the big.Int limits give.
func TestPatternAtTheLimits(t *testing.T) {
	types := []intType{bitType}
	for _, it := range modbusInts {
		types = append(types, it)
	}
	for _, bits := range []uint{1, 3, 12, 31, 32, 33, 63} {
		types = append(types, intType{name: fmt.Sprintf("%d-bit field", bits), bits: bits}, intType{name: fmt.Sprintf("signed %d-bit field", bits), signed: true, bits: bits})
	}
	one := big.NewInt(1)
	for _, it := range types {
		lo, hi := it.min(), it.max()
		for _, x := range []*big.Int{lo, hi, new(big.Int), one, new(big.Int).Neg(one), new(big.Int).Sub(lo, one), new(big.Int).Add(hi, one), new(big.Int).Lsh(one, 64)} {
			got, err := it.pattern(x, x.String)
			fits := x.Cmp(lo) >= 0 && x.Cmp(hi) <= 0
			if fits != (err == nil) {
				t.Errorf("%s: pattern(%s) error %v, want fits=%v", it.name, x, err, fits)
				continue
			}
			if !fits {
				continue
			}
			// the two's complement in it.bits bits, from big.Int arithmetic
			m := new(big.Int).Lsh(one, it.bits)
			want := new(big.Int).Mod(x, m).Uint64()
			if got != want {
				t.Errorf("%s: pattern(%s) = %#x, want %#x", it.name, x, got, want)
			}
		}
	}
}

// Encoding a scaled setpoint, as every do_* on a Modbus register does,
// neither parses the scale and offset again nor makes the type's limits as
// big.Ints: 26 allocations where there were 46 (the race detector adds
// one or two).
func TestEncodeScaledAllocatesLittle(t *testing.T) {
	b := holding(manifest.MBUint16, manifest.BigEndian, manifest.BigEndian)
	b.Scale, b.Offset = 0.1, -5
	m, err := NewModbus(b, capOf(manifest.TypeFloat))
	if err != nil {
		t.Fatal(err)
	}
	if n := allocs.Fewest(100, func() {
		if regs, err := m.Encode(21.5); err != nil || regs[0] != 265 {
			t.Fatalf("encoded %v %v, want [265]", regs, err)
		}
	}); n > 30 {
		t.Errorf("Encode allocated %.0f times, want at most 30", n)
	}
}
