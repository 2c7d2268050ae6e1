package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

// Method answers one extension JSON-RPC method (physmcp/list_peers...):
// params as received (nil when absent), the result to encode, or an error
// answered as JSON-RPC internal error.
type Method func(ctx context.Context, params json.RawMessage) (any, error)

// WithMethods answers the JSON-RPC requests for methods itself and passes
// everything else to next. mcp-go v1.2.1 has no hook for methods outside
// MCP (it answers -32601), so they are taken at the HTTP layer, behind
// Protect like the endpoint: the same tokens and limits apply. A request is
// taken only when it is a single POSTed JSON-RPC request (not a batch)
// naming one of methods; it needs no MCP session, so a peer or a person
// can ask without the initialize handshake.
func WithMethods(next http.Handler, methods map[string]Method) http.Handler {
	var names [][]byte
	for name := range methods {
		names = append(names, []byte(name))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || len(methods) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		// Protect has read and held the body; reading it again is free.
		body, err := requestBody(r)
		if err != nil || !mayName(body, names) {
			next.ServeHTTP(w, r)
			return
		}
		var req struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
		}
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &req) != nil {
			next.ServeHTTP(w, r)
			return
		}
		m, ok := methods[req.Method]
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		switch {
		case req.JSONRPC != "2.0":
			writeJSON(w, http.StatusOK, rpcError(req.ID, -32600, "jsonrpc must be \"2.0\"", nil))
		case len(req.ID) == 0 || string(req.ID) == "null":
			w.WriteHeader(http.StatusAccepted) // a notification: nothing to answer
		default:
			result, err := m(r.Context(), req.Params)
			if err != nil {
				writeJSON(w, http.StatusOK, rpcError(req.ID, -32603, err.Error(), nil))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
		}
	})
}

// mayName says whether body may name one of names as its method: it holds
// one of them, or a backslash (a JSON escape may spell one). Most bodies are
// MCP's; decoding each to find its method was 1 % of a durable do_*'s CPU.
func mayName(body []byte, names [][]byte) bool {
	if bytes.IndexByte(body, '\\') >= 0 {
		return true
	}
	for _, n := range names {
		if bytes.Contains(body, n) {
			return true
		}
	}
	return false
}
