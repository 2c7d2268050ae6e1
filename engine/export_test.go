package engine

// Fingerprint exposes the request fingerprint to tests that seed a store.
var Fingerprint = fingerprint

// NewMemoryStoreSized is NewMemoryStore with its bounds and logger.
var NewMemoryStoreSized = newMemoryStore
