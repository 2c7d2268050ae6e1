// Package allocs measures what a function allocates in a test.
package allocs

import "testing"

// Fewest is the fewest allocations per call of f that testing.AllocsPerRun
// gives over five measurements of runs calls each. AllocsPerRun counts every
// allocation in the process while f runs, so a goroutine that another test
// left running (a timer, an engine's background work) adds its own: they
// can only add, so the fewest is f's.
func Fewest(runs int, f func()) float64 {
	fewest := testing.AllocsPerRun(runs, f)
	for range 4 {
		fewest = min(fewest, testing.AllocsPerRun(runs, f))
	}
	return fewest
}
