package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/physmcp/physmcpd/engine"
)

// shutdownSafeStateTimeout bounds the safe-state writes on the way out, and
// the wait for the dead man's safe state before them.
const shutdownSafeStateTimeout = 10 * time.Second

// guardSafeState drives the actuators to their safe values now (before
// serving), watches the dead man when the manifest sets one, and returns the
// function serve defers: it stops the dead-man watch and the reading watches
// and applies the safe state again on the way out (SIGTERM, SIGINT or the
// client closing stdio). Every wait there is bounded, even for a driver
// wedged in a transaction that ignores its context (a hung adapter or
// ioctl): the way out then takes at most shutdownSafeStateTimeout for the
// dead man, the watches' bound (Engine.StopWatches) and
// shutdownSafeStateTimeout and engine.WedgeMargin for the safe state.
func guardSafeState(ctx context.Context, e *engine.Engine, logger *slog.Logger) (stop func()) {
	if err := e.ApplySafeState(ctx, "start-up"); err != nil {
		logger.Error("safe state at start-up incomplete", "err", err)
	}
	watch, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		timeout := e.DeadManTimeout()
		if timeout <= 0 {
			return
		}
		t := time.NewTicker(min(max(timeout/10, 10*time.Millisecond), time.Second))
		defer t.Stop()
		for {
			select {
			case <-watch.Done():
				return
			case <-t.C:
				if _, err := e.CheckDeadMan(watch); err != nil {
					logger.Error("dead-man safe state incomplete", "err", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		if !waitFor(done, shutdownSafeStateTimeout) {
			logger.Error("the dead man's safe state has not returned: a driver is wedged; applying the shutdown safe state without it",
				"waited", shutdownSafeStateTimeout)
		}
		// No poll is on a bus while the safe values are written, nor after.
		e.StopWatches()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownSafeStateTimeout)
		defer cancel()
		applied := make(chan struct{})
		go func() {
			defer close(applied)
			if err := e.ApplySafeState(sctx, "shutdown"); err != nil {
				logger.Error("safe state at shutdown incomplete", "err", err)
			}
		}()
		if !waitFor(applied, shutdownSafeStateTimeout+engine.WedgeMargin) {
			logger.Error("the safe state at shutdown has not returned: a driver is wedged; exiting without it",
				"waited", shutdownSafeStateTimeout+engine.WedgeMargin)
		}
	}
}

// waitFor waits until done is closed, for at most d, and says whether it was.
func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
