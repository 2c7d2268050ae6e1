package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/pollfile"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/profiles"
)

// serveStream runs session on stdio or, with --serial, on the serial line
// (a new session each time the line is reopened), and tells systemd the
// device is ready once the transport is open. Stdin is read on Go's
// poller when it is a pipe or socket (internal/pollfile). Both builds serve streams
// through it, each with its own MCP server.
func serveStream(ctx context.Context, cfg serveConfig, e *engine.Engine, session func(context.Context, io.Reader, io.Writer) error, stdin io.Reader, stdout io.Writer, logger *slog.Logger) int {
	releaseStartPages(logger)
	if cfg.transport() == profiles.Serial {
		stopping := func() {}
		defer func() { stopping() }()
		port := mcpcore.SerialPort{Path: cfg.serialPort, Baud: cfg.baud, Opened: func() { stopping = notifyReady(ctx, e.Health, logger) }}
		onLine := func(ctx context.Context, rw io.ReadWriter) error { return session(ctx, rw, rw) }
		if err := mcpcore.ServeSerial(ctx, port, onLine, logger); err != nil {
			logger.Error("serial transport failed", "err", err)
			return 1
		}
	} else {
		if f, ok := stdin.(*os.File); ok {
			written := []*os.File{os.Stderr}
			if out, ok := stdout.(*os.File); ok {
				written = append(written, out)
			}
			r, restore, err := pollfile.Reader(f, written...)
			if err != nil {
				logger.Warn("reading stdin blocking", "err", err)
			}
			defer func() {
				if err := restore(); err != nil {
					logger.Warn("restoring stdin", "err", err)
				}
			}()
			stdin = r
		}
		stopping := notifyReady(ctx, e.Health, logger)
		defer stopping()
		if err := session(ctx, stdin, stdout); err != nil {
			logger.Error("stdio transport failed", "err", err)
			return 1
		}
	}
	logger.Info("stopped")
	return 0
}
