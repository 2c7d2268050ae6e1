package mcpserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
)

// ServeStdio serves s on in/out (newline-delimited JSON-RPC) until in ends or
// ctx is cancelled; both are a clean end (nil). It is ServeStream with the
// default limits.
func ServeStdio(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer) error {
	return ServeStream(ctx, s, in, out, StreamLimits{})
}

// EndpointPath is where the streamable HTTP transport is served.
const EndpointPath = mcpcore.EndpointPath

// HTTPHandler serves MCP over streamable HTTP at EndpointPath. mcp-go
// negotiates every protocol version it knows (2024-11-05 up to 2025-11-25
// through initialize, 2026-07-28 through server/discover), and rejects
// requests that arrive on a loopback address with a non-loopback Host header
// (DNS rebinding protection, left on). Sessions are bounded by SessionLimits.
type HTTPHandler struct {
	mux        *http.ServeMux
	logger     *slog.Logger
	sessions   *sessionTable
	mu         sync.Mutex                     // guards transports and endpoints (Mount adds to them while serving)
	transports []*server.StreamableHTTPServer // one per endpoint (see NewEndpointsHandler)
	endpoints  []*sessionEndpoint
}

// NewHTTPHandler wraps s for HTTP with the default session limits. logger
// receives transport-level events (nil means slog.Default()).
func NewHTTPHandler(s *server.MCPServer, logger *slog.Logger) *HTTPHandler {
	h := newHTTPHandler(logger, SessionLimits{})
	h.mount(EndpointPath, s)
	return h
}

func newHTTPHandler(logger *slog.Logger, limits SessionLimits) *HTTPHandler {
	if logger == nil {
		logger = slog.Default()
	}
	return &HTTPHandler{mux: http.NewServeMux(), logger: logger, sessions: newSessionTable(limits, logger)}
}

// mount serves s at path, its sessions kept in h's table.
func (h *HTTPHandler) mount(path string, s *server.MCPServer) {
	ep := &sessionEndpoint{table: h.sessions}
	ep.transport = server.NewStreamableHTTPServer(s, server.WithStreamableHTTPLogger(h.logger), server.WithSessionIdManagerResolver(ep))
	ep.lists = newToolLists(ep.transport, toolsVersion(s))
	ep.fast = fastReadsOf(s)
	h.mux.Handle(path, ep)
	h.mu.Lock()
	h.transports = append(h.transports, ep.transport)
	h.endpoints = append(h.endpoints, ep)
	h.mu.Unlock()
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// OpenSessions is the number of streamable HTTP sessions open across h's
// endpoints.
func (h *HTTPHandler) OpenSessions() int {
	h.sessions.mu.Lock()
	defer h.sessions.mu.Unlock()
	return len(h.sessions.byID)
}

// CloseSessions ends every open session, which releases long-lived GET
// streams so that http.Server.Shutdown can finish.
func (h *HTTPHandler) CloseSessions(ctx context.Context) {
	h.mu.Lock()
	transports := slices.Clone(h.transports)
	h.mu.Unlock()
	for _, t := range transports {
		t.CloseSessions(ctx)
	}
}

// readHeaderTimeout bounds how long a client may take to send a request's
// headers; Access.BodyTimeout bounds its body.
const readHeaderTimeout = 10 * time.Second

// idleTimeout closes a keep-alive connection no request has used for this
// long. It is longer than the idle timeout of Go's HTTP clients (90 s), so
// that they close first and do not send on a connection being closed.
const idleTimeout = 2 * time.Minute

// NewHTTPServer is the http.Server for h. It has no WriteTimeout, which
// would cut the long-lived SSE streams of MCP (the GET stream, a call waiting
// for a person's approval), and no ReadTimeout: Protect gives each request
// body its own deadline, shorter for requests it refuses.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
}
