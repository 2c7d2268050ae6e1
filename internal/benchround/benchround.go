// Package benchround times alternatives side by side in benchmarks. The
// machine is shared and its load drifts, so the alternatives run in
// interleaved rounds and a ratio is taken within each round, then summarised
// by its median over the rounds.
package benchround

import (
	"slices"
	"testing"
	"time"
)

// Rounds runs each of arms once per b.Loop iteration, n operations each, in
// an order that rotates from round to round (so neither always runs first),
// and returns the nanoseconds per operation: ns[round][arm].
func Rounds(b *testing.B, n int, arms ...func(n int)) [][]float64 {
	var ns [][]float64
	for b.Loop() {
		row := make([]float64, len(arms))
		for k := range arms {
			i := (k + len(ns)) % len(arms)
			start := time.Now()
			arms[i](n)
			row[i] = float64(time.Since(start).Nanoseconds()) / float64(n)
		}
		ns = append(ns, row)
	}
	return ns
}

// Median of xs (which it sorts).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}

// Column is arm i's time per operation in every round.
func Column(ns [][]float64, i int) []float64 {
	out := make([]float64, len(ns))
	for r, row := range ns {
		out[r] = row[i]
	}
	return out
}

// Ratios is f of each round's times, one value per round.
func Ratios(ns [][]float64, f func(row []float64) float64) []float64 {
	out := make([]float64, len(ns))
	for r, row := range ns {
		out[r] = f(row)
	}
	return out
}
