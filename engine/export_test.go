package engine

import "time"

// Fingerprint exposes the request fingerprint to tests that seed a store.
var Fingerprint = fingerprint

// NewMemoryStoreSized is NewMemoryStore with its bounds and logger.
var NewMemoryStoreSized = newMemoryStore

// SetPollWedgeMargin sets how long past a poll's timeout Stop and
// StopWatches wait for it, until restore is called; not for parallel tests.
func SetPollWedgeMargin(d time.Duration) (restore func()) {
	old := pollWedgeMargin
	pollWedgeMargin = d
	return func() { pollWedgeMargin = old }
}
