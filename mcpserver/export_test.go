package mcpserver

import (
	"weak"

	"github.com/mark3labs/mcp-go/server"
)

// DisableFastReads has mcp-go answer every request of h, read_* calls
// included (fastread.go), so that tests can compare the two.
func DisableFastReads(h *HTTPHandler) {
	for _, ep := range h.endpoints {
		ep.fast = nil
	}
}

// FastReadsServed counts the calls h's endpoints answered without mcp-go.
func FastReadsServed(h *HTTPHandler) int64 {
	var n int64
	for _, ep := range h.endpoints {
		if ep.fast != nil {
			n += ep.fast.served.Load()
		}
	}
	return n
}

// DisableStreamFastReads has mcp-go answer every request of s's stream
// sessions, read_* calls included (streamserve.go).
func DisableStreamFastReads(s *server.MCPServer) { fastEndpoints.Delete(weak.Make(s)) }

// StreamFastReadsServed counts the calls s's fast path answered.
func StreamFastReadsServed(s *server.MCPServer) int64 { return fastReadsOf(s).served.Load() }
