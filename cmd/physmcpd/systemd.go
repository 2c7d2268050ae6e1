package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/physmcp/physmcpd/internal/sdnotify"
)

// notifyReady tells systemd (Type=notify) that the device is being served
// and, when systemd watches it, sends keep-alives while health passes (see
// keepAlive) until ctx ends. Without $NOTIFY_SOCKET it does nothing. The
// returned function sends STOPPING=1.
func notifyReady(ctx context.Context, health func(context.Context) error, logger *slog.Logger) (stopping func()) {
	n := sdnotify.New(nil)
	if !n.Enabled() {
		return func() {}
	}
	if err := n.Send("READY=1"); err != nil {
		logger.Warn("cannot notify systemd", "err", err)
	}
	interval, ok, err := n.WatchdogInterval()
	if err != nil {
		logger.Warn("systemd watchdog not fed", "err", err)
	}
	if ok {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			keepAlive(ctx, t.C, interval/2, health, n.Send, logger)
		}()
	}
	return func() {
		if err := n.Send("STOPPING=1"); err != nil {
			logger.Warn("cannot notify systemd", "err", err)
		}
	}
}

// keepAlive sends WATCHDOG=1 on every tick after health has passed within
// deadline. The first check that fails ends the keep-alives for good and is
// logged (and shown by systemctl status) once: systemd then restarts the
// service at WatchdogSec. A wedged bus or a deadlocked engine does not come
// back by waiting, and keep-alives that resumed could race systemd's timer.
func keepAlive(ctx context.Context, tick <-chan time.Time, deadline time.Duration, health func(context.Context) error, send func(string) error, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		checkCtx, cancel := context.WithTimeout(ctx, deadline)
		err := health(checkCtx)
		cancel()
		if ctx.Err() != nil {
			return // shutting down: the check was cut short, not failed
		}
		if err != nil {
			logger.Error("unhealthy: no more systemd watchdog keep-alives, so systemd restarts the service", "err", err)
			if err := send("STATUS=unhealthy: " + err.Error()); err != nil {
				logger.Warn("cannot notify systemd", "err", err)
			}
			return
		}
		if err := send("WATCHDOG=1"); err != nil {
			logger.Warn("systemd watchdog keep-alive failed", "err", err)
		}
	}
}
