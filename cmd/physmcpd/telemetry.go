//go:build !lite

package main

import (
	"log/slog"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/telemetry"
)

// startTelemetry publishes e's readings when the manifest has a telemetry
// section; stop ends it before the buses close.
func startTelemetry(e *engine.Engine, logger *slog.Logger) (stop func(), err error) {
	p, err := telemetry.Start(e, e.Manifest(), logger)
	if err != nil {
		return nil, err
	}
	return func() {
		if err := p.Close(); err != nil {
			logger.Warn("closing telemetry", "err", err)
		}
	}, nil
}
