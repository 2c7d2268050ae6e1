package exact

import (
	"math/big"
	"testing"
)

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		num, den          int64
		half, floor, ceil int64
	}{
		{5, 2, 3, 2, 3}, {-5, 2, -3, -3, -2}, {7, 3, 2, 2, 3}, {-7, 3, -2, -3, -2}, {4, 1, 4, 4, 4}, {0, 1, 0, 0, 0},
	} {
		r := big.NewRat(tc.num, tc.den)
		if got := RoundHalfAway(r).Int64(); got != tc.half {
			t.Errorf("RoundHalfAway(%s) = %d, want %d", r, got, tc.half)
		}
		if got := Floor(r).Int64(); got != tc.floor {
			t.Errorf("Floor(%s) = %d, want %d", r, got, tc.floor)
		}
		if got := Ceil(r).Int64(); got != tc.ceil {
			t.Errorf("Ceil(%s) = %d, want %d", r, got, tc.ceil)
		}
	}
	if got := Decimal(0.1); got.Cmp(big.NewRat(1, 10)) != 0 {
		t.Errorf("Decimal(0.1) = %s, want 1/10", got)
	}
}
