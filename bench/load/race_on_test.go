//go:build race

package main

// The race detector allows 8128 live goroutines and slows everything ~10x,
// so the race build runs fewer clients.
const raceBuild = true
