package mcpserver

import (
	"context"
	"errors"
	"io"

	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/internal/ndjson"
)

// StreamLimits bound one newline-delimited JSON-RPC session (stdio or a
// serial line). Zero means the defaults (mcp-go's: 5 workers, 100 queued
// calls, no message size limit).
type StreamLimits struct {
	Workers         int // tool calls running at once
	Queue           int // tool calls waiting for a worker
	MaxMessageBytes int // longest message (line) accepted
}

// ErrMessageTooLong ends a session whose peer sent a message longer than
// StreamLimits.MaxMessageBytes.
var ErrMessageTooLong = ndjson.ErrTooLong

// ServeStream serves s on in/out under lim until in ends or ctx is
// cancelled; both are a clean end (nil).
func ServeStream(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer, lim StreamLimits) error {
	err := serveLines(ctx, s, in, out, lim)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}
