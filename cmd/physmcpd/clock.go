package main

import (
	"context"
	"log/slog"

	"github.com/physmcp/physmcpd/internal/clocksync"
)

// clockProbe is what tells the engine whether readings' timestamps can be
// trusted: the kernel's synchronisation flag, polled in the background. nil
// (always trusted) for a simulated device, whose values are not measurements,
// and under --trust-clock, for a board whose real-time clock keeps the time
// without NTP (the kernel calls that clock unsynchronised all the same).
func clockProbe(ctx context.Context, cfg serveConfig, logger *slog.Logger) func() bool {
	if cfg.simulate || cfg.trustClock {
		return nil
	}
	return clocksync.Watch(ctx, clocksync.Interval, clocksync.Synced, func(synced bool, err error) {
		switch {
		case err != nil:
			logger.Warn("cannot tell whether the system clock is synchronised, so readings are not flagged", "err", err)
		case synced:
			logger.Info("system clock synchronised")
		default:
			logger.Warn("system clock not synchronised: readings are degraded until an NTP client sets it (serve --trust-clock if a real-time clock keeps it)")
		}
	})
}
