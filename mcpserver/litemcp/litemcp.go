// Package litemcp serves a device's read_* and can_do tools over a
// newline-delimited JSON-RPC stream (stdio or a serial line) for the Lite
// build. It implements the few MCP methods such a server needs (initialize,
// ping, tools/list, tools/call) on the standard library, so that the Lite
// binary links neither mcp-go nor net/http; the tools and their answers are
// mcpcore's, the same as the Full build serves.
//
// Memory is bounded by construction: one message is at most MaxMessageBytes,
// Workers calls run at once and Queue more wait (up to Workers more while
// the reader runs calls itself, each held by a worker waiting for a slot:
// internal/callpool); beyond that the reader stops
// reading, so a fast peer waits on the line instead of growing a buffer.
package litemcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/callpool"
	"github.com/physmcp/physmcpd/internal/ndjson"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/promcp"
)

// Options configure a server.
type Options struct {
	Name, Version string // serverInfo; defaults "physmcpd" and "dev"
	// Caller is whoever is on the stream (the policy's local or serial role).
	Caller engine.Caller
	// Group is the manifest group served (mcpcore.GroupTools).
	Group  string
	Logger *slog.Logger // defaults to slog.Default()
	// Workers (default 1), Queue (default 0) and MaxMessageBytes (default
	// 64 KiB) bound a session.
	Workers, Queue, MaxMessageBytes int
}

// ErrMessageTooLong ends a session whose peer sent a message longer than
// Options.MaxMessageBytes.
var ErrMessageTooLong = ndjson.ErrTooLong

// protocolVersions are the MCP versions negotiated through initialize,
// oldest first; a client asking for another gets the newest.
var protocolVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// Server is one endpoint's MCP server for the Lite build.
type Server struct {
	opts    Options
	surface *mcpcore.Surface
	kinds   map[string]engine.ToolKind // the tools the caller may call
	list    json.RawMessage            // the tools/list result, encoded once
	info    map[string]any             // the initialize result but protocolVersion
}

// New builds the server for e's tools that opts.Caller's role may call (the
// others are neither listed nor callable, as in the Full build).
func New(e *engine.Engine, opts Options) (*Server, error) {
	if opts.Name == "" {
		opts.Name = "physmcpd"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Workers = max(opts.Workers, 1)
	opts.Queue = max(opts.Queue, 0)
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 64 << 10
	}
	surface, err := mcpcore.NewSurface(e, opts.Group, nil)
	if err != nil {
		return nil, err
	}
	all, err := mcpcore.Tools(e)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, surface: surface, kinds: map[string]engine.ToolKind{}}
	tools := []mcpcore.Tool{}
	for _, t := range surface.Tools() {
		// stream_* needs resource subscriptions, which only the Full build serves
		if t.Kind == engine.ToolStream || !e.Permits(t.Name, opts.Caller.Role) {
			continue
		}
		s.kinds[t.Name] = t.Kind
		i := slices.IndexFunc(all, func(d mcpcore.Tool) bool { return d.Name == t.Name })
		tools = append(tools, all[i])
	}
	// By name, as mcp-go lists them: a client sees the same list from either build.
	slices.SortFunc(tools, func(a, b mcpcore.Tool) int { return strings.Compare(a.Name, b.Name) })
	if s.list, err = json.Marshal(map[string]any{"tools": tools}); err != nil {
		return nil, fmt.Errorf("encode tools/list: %w", err)
	}
	m := e.Manifest()
	about := map[string]any{"promcp_base": promcp.BaseVersion, "device_id": m.Device.ID, "physmcp_version": m.PhysMCPVersion}
	if opts.Group != "" {
		about["group"] = opts.Group
	}
	s.info = map[string]any{
		"capabilities": map[string]any{"tools": map[string]any{"listChanged": false}, "experimental": map[string]any{"promcp": about}},
		"serverInfo":   map[string]any{"name": opts.Name, "version": opts.Version},
		"instructions": mcpcore.Instructions(m) + mcpcore.GroupNote(m, opts.Group),
	}
	return s, nil
}

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// JSON-RPC error codes.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeNoMethod       = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
)

// Serve runs one session on in/out until in ends (nil), ctx is cancelled
// (nil) or the peer breaks the framing (ErrMessageTooLong). When in ends,
// the calls already read are answered before Serve returns; when ctx ends,
// the calls running are.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	w := &writer{enc: json.NewEncoder(out)}
	calls := callpool.Start(ctx, s.opts.Workers, s.opts.Queue, func(req request) { w.send(s.call(ctx, req)) })
	lines := bufio.NewReaderSize(in, 4096)
	done := calls.Read(ctx, func() (request, bool, error) { return s.next(ctx, lines, w) },
		func() bool { return lines.Buffered() > 0 })
	var err error
	select {
	case err = <-done:
		calls.Close()
	case <-ctx.Done():
		// The reader may sit in a Read that only the end of in (closing the
		// port, the process exiting) ends; it sends nothing more.
	}
	calls.Wait()
	return err
}

// next reads messages until one is a tools/call, which it returns for the
// calls' pool (callpool), and false at the input's end or ctx's (nil) or
// when the framing breaks; it answers the rest at once.
func (s *Server) next(ctx context.Context, in *bufio.Reader, w *writer) (request, bool, error) {
	for {
		line, err := ndjson.ReadLine(in, s.opts.MaxMessageBytes)
		if errors.Is(err, io.EOF) || ctx.Err() != nil {
			return request{}, false, nil
		}
		if err != nil {
			return request{}, false, err
		}
		if len(line) == 0 {
			continue
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			w.send(response{ID: json.RawMessage("null"), Error: &rpcError{codeParse, "parse error: " + err.Error()}})
			continue
		}
		if req.ID == nil { // a notification (initialized, cancelled): nothing to answer
			continue
		}
		switch req.Method {
		case "tools/call":
			return req, true, nil
		case "initialize":
			w.send(s.initialize(req))
		case "ping":
			w.send(response{ID: req.ID, Result: struct{}{}})
		case "tools/list":
			w.send(response{ID: req.ID, Result: s.list})
		case "":
			w.send(response{ID: req.ID, Error: &rpcError{codeInvalidRequest, "request without a method"}})
		default:
			w.send(response{ID: req.ID, Error: &rpcError{codeNoMethod, "method not found: " + req.Method}})
		}
	}
}

func (s *Server) initialize(req request) response {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return response{ID: req.ID, Error: &rpcError{codeInvalidParams, "initialize: " + err.Error()}}
		}
	}
	version := protocolVersions[len(protocolVersions)-1]
	switch {
	case p.ProtocolVersion == "":
		version = "2025-03-26" // what the specification says to assume
	case slices.Contains(protocolVersions, p.ProtocolVersion):
		version = p.ProtocolVersion
	}
	result := map[string]any{"protocolVersion": version}
	for k, v := range s.info {
		result[k] = v
	}
	return response{ID: req.ID, Result: result}
}

// toolResult carries one proMCP body as structuredContent and, for clients
// that only read text, as the same JSON in a text block.
type toolResult struct {
	Content           []textContent   `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// call answers one tools/call; a panic below it is that call's internal error.
func (s *Server) call(ctx context.Context, req request) (resp response) {
	var p struct {
		Name      string `json:"name"`
		Arguments any    `json:"arguments"`
	}
	defer func() {
		if r := recover(); r != nil {
			s.opts.Logger.Error("tool handler panic recovered", "tool", p.Name, "panic", r, "stack", string(debug.Stack()))
			resp = response{ID: req.ID, Error: &rpcError{codeInternal, fmt.Sprintf("internal error in physmcpd (%v); this is a bug, please report it", r)}}
		}
	}()
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return response{ID: req.ID, Error: &rpcError{codeInvalidParams, "tools/call: " + err.Error()}}
	}
	kind, ok := s.kinds[p.Name]
	if !ok {
		return response{ID: req.ID, Error: &rpcError{codeInvalidParams, fmt.Sprintf("tool '%s' not found", p.Name)}}
	}
	args, problem := mcpcore.Arguments(p.Arguments)
	var (
		body    any
		isError bool
		err     error
	)
	switch kind {
	case engine.ToolRead:
		body, isError, err = s.surface.Read(ctx, s.opts.Caller, p.Name, args, problem)
	case engine.ToolCanDo:
		body, err = s.surface.CanDo(ctx, s.opts.Caller, args, problem)
	default: // the Lite profile binds no do_ capability
		err = fmt.Errorf("%s: this build serves read_* and can_do only", p.Name)
	}
	if err != nil {
		s.opts.Logger.Warn("tool call failed", "tool", p.Name, "err", err)
		return response{ID: req.ID, Error: &rpcError{codeInternal, err.Error()}}
	}
	text, err := json.Marshal(body)
	if err != nil {
		return response{ID: req.ID, Error: &rpcError{codeInternal, "encode result: " + err.Error()}}
	}
	return response{ID: req.ID, Result: toolResult{Content: []textContent{{"text", string(text)}}, StructuredContent: text, IsError: isError}}
}

// writer sends one response per line; workers and the reader share it.
type writer struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *writer) send(r response) {
	r.JSONRPC = "2.0"
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(r); err != nil {
		slog.Debug("cannot answer on the stream", "err", err)
	}
}
