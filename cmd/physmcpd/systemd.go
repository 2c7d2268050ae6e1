package main

import (
	"context"
	"log/slog"

	"github.com/physmcp/physmcpd/internal/sdnotify"
)

// notifyReady tells systemd (Type=notify) that the device is being served and
// keeps its watchdog fed until ctx ends. Without $NOTIFY_SOCKET it does nothing.
// The returned function sends STOPPING=1.
func notifyReady(ctx context.Context, logger *slog.Logger) (stopping func()) {
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
		go n.Watchdog(ctx, interval, func(err error) { logger.Warn("systemd watchdog keep-alive failed", "err", err) })
	}
	return func() {
		if err := n.Send("STOPPING=1"); err != nil {
			logger.Warn("cannot notify systemd", "err", err)
		}
	}
}
