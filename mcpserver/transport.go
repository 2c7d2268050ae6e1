package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/mark3labs/mcp-go/server"
)

// ServeStdio serves s on in/out (newline-delimited JSON-RPC) until in ends or
// ctx is cancelled; both are a clean end (nil). mcp-go's transport errors go
// to slog.Default at error level.
func ServeStdio(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer) error {
	stdio := server.NewStdioServer(s)
	stdio.SetErrorLogger(slog.NewLogLogger(slog.Default().Handler(), slog.LevelError))
	err := stdio.Listen(ctx, in, out)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// EndpointPath is where the streamable HTTP transport is served.
const EndpointPath = "/mcp"

// HTTPHandler serves MCP over streamable HTTP at EndpointPath. mcp-go
// negotiates every protocol version it knows (2024-11-05 up to 2025-11-25
// through initialize, 2026-07-28 through server/discover), and rejects
// requests that arrive on a loopback address with a non-loopback Host header
// (DNS rebinding protection, left on).
type HTTPHandler struct {
	mux        *http.ServeMux
	logger     *slog.Logger
	transports []*server.StreamableHTTPServer // one per endpoint (see NewEndpointsHandler)
}

// NewHTTPHandler wraps s for HTTP. logger receives transport-level events
// (nil means slog.Default()).
func NewHTTPHandler(s *server.MCPServer, logger *slog.Logger) *HTTPHandler {
	h := newHTTPHandler(logger)
	h.mount(EndpointPath, s)
	return h
}

func newHTTPHandler(logger *slog.Logger) *HTTPHandler {
	if logger == nil {
		logger = slog.Default()
	}
	return &HTTPHandler{mux: http.NewServeMux(), logger: logger}
}

// mount serves s at path.
func (h *HTTPHandler) mount(path string, s *server.MCPServer) {
	t := server.NewStreamableHTTPServer(s, server.WithStreamableHTTPLogger(h.logger))
	h.mux.Handle(path, t)
	h.transports = append(h.transports, t)
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// CloseSessions ends every open session, which releases long-lived GET
// streams so that http.Server.Shutdown can finish.
func (h *HTTPHandler) CloseSessions(ctx context.Context) {
	for _, t := range h.transports {
		t.CloseSessions(ctx)
	}
}
