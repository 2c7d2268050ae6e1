// Package exact is the decimal arithmetic that the codec and the manifest's
// description of an encoding share, so what validate promises is what the
// codec writes: numbers are taken as the shortest decimal that names them
// (0.1 is 1/10, not 0.1000000000000000055…) and rounded ties away from zero.
package exact

import (
	"math/big"
	"strconv"
)

// Decimal is the exact value of the shortest decimal that identifies the
// finite float f.
func Decimal(f float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if !ok {
		panic("exact: unparsable float " + strconv.FormatFloat(f, 'g', -1, 64)) // finite floats always parse
	}
	return r
}

// RoundHalfAway rounds r to the nearest integer, ties away from zero.
func RoundHalfAway(r *big.Rat) *big.Int {
	q, rem := new(big.Int).QuoRem(new(big.Int).Abs(r.Num()), r.Denom(), new(big.Int))
	if rem.Lsh(rem, 1).Cmp(r.Denom()) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if r.Sign() < 0 {
		q.Neg(q)
	}
	return q
}

// Floor rounds r down (Euclidean division floors for a Rat's positive denominator).
func Floor(r *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q
}

// Ceil rounds r up.
func Ceil(r *big.Rat) *big.Int {
	q := Floor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}
