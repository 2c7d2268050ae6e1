package mcpcore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/physmcp/physmcpd/internal/serialline"
)

// SerialPort is a serial line to serve on.
type SerialPort struct {
	Path string // e.g. /dev/ttyS0, /dev/ttyAMA0, /dev/serial/by-id/...
	Baud int
	// Opened, when set, is called once the line is first open, before the
	// first session (systemd's READY=1 waits for it).
	Opened func()
}

// serialRetry is how long ServeSerial waits before reopening a line that failed.
const serialRetry = 2 * time.Second

// ServeSerial runs session on a serial line (8N1, raw, newline-delimited
// JSON-RPC, as on stdio) so that a proxy node can adopt this one. A line
// that cannot be opened at the start is an error; a session that ends later
// (the adapter was unplugged, the peer sent garbage) is logged and the line
// reopened, until ctx is cancelled. A session returns nil when ctx ended it.
func ServeSerial(ctx context.Context, sp SerialPort, session func(context.Context, io.ReadWriter) error, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	port, err := serialline.Open(sp.Path, sp.Baud)
	if err != nil {
		return fmt.Errorf("open serial line %s at %d baud: %w", sp.Path, sp.Baud, err)
	}
	logger.Info("serving on a serial line", "port", sp.Path, "baud", sp.Baud)
	if sp.Opened != nil {
		sp.Opened()
	}
	for {
		err := serveOnce(ctx, port, session)
		if ctx.Err() != nil {
			return nil
		}
		logger.Warn("serial session ended; reopening the line", "port", sp.Path, "err", err, "in", serialRetry)
		for port = nil; port == nil; {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(serialRetry):
			}
			if port, err = serialline.Open(sp.Path, sp.Baud); err != nil {
				logger.Warn("cannot reopen the serial line", "port", sp.Path, "err", err)
			}
		}
	}
}

// serveOnce runs one session and closes the port, which also releases the
// session's reader goroutine when the session ended on ctx.
func serveOnce(ctx context.Context, port *serialline.Line, session func(context.Context, io.ReadWriter) error) error {
	defer port.Close()
	err := session(ctx, port)
	if err == nil {
		err = io.EOF
	}
	return err
}
