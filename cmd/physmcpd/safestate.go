package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/physmcp/physmcpd/engine"
)

// shutdownSafeStateTimeout bounds the safe-state writes on the way out.
const shutdownSafeStateTimeout = 10 * time.Second

// guardSafeState drives the actuators to their safe values now (before
// serving), watches the dead man when the manifest sets one, and returns the
// function serve defers: it stops the dead-man watch and the reading watches
// and applies the safe state again on the way out (SIGTERM, SIGINT or the client closing stdio).
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
		<-done
		// No poll is on a bus while the safe values are written, nor after.
		e.StopWatches()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownSafeStateTimeout)
		defer cancel()
		if err := e.ApplySafeState(sctx, "shutdown"); err != nil {
			logger.Error("safe state at shutdown incomplete", "err", err)
		}
	}
}
