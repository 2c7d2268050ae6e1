package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// The kernel's clock flag is asked on hardware only, and not under --trust-clock.
func TestClockProbeOnHardwareOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		cfg   serveConfig
		probe bool
	}{
		{serveConfig{}, true},
		{serveConfig{simulate: true}, false},
		{serveConfig{trustClock: true}, false},
	} {
		if got := clockProbe(ctx, tc.cfg, logger) != nil; got != tc.probe {
			t.Errorf("%+v: probe %v, want %v", tc.cfg, got, tc.probe)
		}
	}
}
