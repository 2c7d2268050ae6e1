package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"go.bug.st/serial"
)

// StreamLimits bound one newline-delimited JSON-RPC session (stdio or a
// serial line). Zero means mcp-go's default (5 workers, 100 queued calls, no
// message size limit).
type StreamLimits struct {
	Workers         int // tool calls running at once
	Queue           int // tool calls waiting for a worker
	MaxMessageBytes int // longest message (line) accepted
}

// ErrMessageTooLong ends a session whose peer sent a message longer than
// StreamLimits.MaxMessageBytes.
var ErrMessageTooLong = errors.New("JSON-RPC message longer than the limit")

// ServeStream serves s on in/out under lim until in ends or ctx is
// cancelled; both are a clean end (nil).
func ServeStream(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer, lim StreamLimits) error {
	stdio := server.NewStdioServer(s)
	stdio.SetErrorLogger(slog.NewLogLogger(slog.Default().Handler(), slog.LevelError))
	server.WithWorkerPoolSize(lim.Workers)(stdio)
	server.WithQueueSize(lim.Queue)(stdio)
	if lim.MaxMessageBytes > 0 {
		in = &lineLimiter{r: in, max: lim.MaxMessageBytes}
	}
	err := stdio.Listen(ctx, in, out)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// lineLimiter fails a read once a line grows past max bytes, before mcp-go's
// reader buffers all of it.
type lineLimiter struct {
	r    io.Reader
	max  int
	line int // bytes since the last newline
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, b := range p[:n] {
		if b == '\n' {
			l.line = 0
			continue
		}
		if l.line++; l.line > l.max {
			return 0, fmt.Errorf("%w (%d bytes)", ErrMessageTooLong, l.max)
		}
	}
	return n, err
}

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

// ServeSerial serves s on a serial line (8N1, raw, newline-delimited
// JSON-RPC, as on stdio) so that a proxy node can adopt this one. A line
// that cannot be opened at the start is an error; a session that ends later
// (the adapter was unplugged, the peer sent garbage) is logged and the line
// reopened, until ctx is cancelled.
func ServeSerial(ctx context.Context, s *server.MCPServer, sp SerialPort, lim StreamLimits, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	mode := &serial.Mode{BaudRate: sp.Baud, DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit}
	port, err := serial.Open(sp.Path, mode)
	if err != nil {
		return fmt.Errorf("open serial line %s at %d baud: %w", sp.Path, sp.Baud, err)
	}
	logger.Info("serving on a serial line", "port", sp.Path, "baud", sp.Baud)
	if sp.Opened != nil {
		sp.Opened()
	}
	for {
		err := serveOnce(ctx, s, port, lim)
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
			if port, err = serial.Open(sp.Path, mode); err != nil {
				logger.Warn("cannot reopen the serial line", "port", sp.Path, "err", err)
			}
		}
	}
}

// serveOnce runs one session and closes the port, which also releases
// mcp-go's reader goroutine when the session ended on ctx.
func serveOnce(ctx context.Context, s *server.MCPServer, port serial.Port, lim StreamLimits) error {
	defer port.Close()
	err := ServeStream(ctx, s, port, port, lim)
	if err == nil {
		err = io.EOF
	}
	return err
}
