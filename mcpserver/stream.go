package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/mark3labs/mcp-go/server"
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
