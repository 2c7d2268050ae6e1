package engine

// Fingerprint exposes the request fingerprint to tests that seed a store.
var Fingerprint = fingerprint
