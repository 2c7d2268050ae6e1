// Package mcpserver is the MCP edge of physmcpd: it turns the engine's tools
// into mcp-go tools (one per capability plus can_do) with generated schemas
// and explicit annotations, maps calls to the engine and its proMCP bodies to
// tool results, and serves them over stdio or streamable HTTP. It holds no
// device logic: every check and every decision is the engine's.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/profiles"
	"github.com/physmcp/physmcpd/promcp"
)

// Options configure the adapter.
type Options struct {
	// Name and Version are reported in serverInfo; defaults "physmcpd" and "dev".
	Name    string
	Version string
	// Caller says who is calling (stdio: the policy's local role; HTTP: the
	// authenticated token). Nil means an anonymous caller with role none.
	Caller func(ctx context.Context) engine.Caller
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for bodies the adapter writes itself; defaults to time.Now.
	Now func() time.Time
	// Approvals issues the states that bind a person's approval to one
	// call; nil means one of the server's own. Endpoints that share one let
	// the status page list every approval waiting for an answer.
	Approvals *auth.Approvals
	// Group is the manifest group this server is the endpoint of: its
	// capabilities and a can_do scoped to them. "" is the capabilities
	// without a group (all of them when the device has no groups).
	Group string
	// Router, when set, completes each can_do report beyond this device
	// (the PhysMCP mesh); nil answers for this device alone.
	Router CanDoRouter
	// ToolsChange: the engine's tools may change while the server runs (an
	// aggregator adopting the devices of the mesh). The server then declares
	// tools.listChanged, lists its tools again on every change and tells
	// its sessions (dynamic.go).
	ToolsChange bool
	// Profile is the name of the profile served (docs/profiles.md), which
	// the device resource reports; "" is full.
	Profile string
}

// CanDoRouter answers can_do beyond this device: args are the call's
// arguments, meta its _meta, role the caller's role here (what the mesh's
// devices answer is held to it), local makes this device's own report (the
// router may skip it: a query answered already on another mesh path). It
// returns local's error as it is; any other error refuses the call.
type CanDoRouter interface {
	Route(ctx context.Context, args map[string]any, meta map[string]any, role manifest.Role, local func(context.Context) (promcp.CapabilityReport, error)) (promcp.CapabilityReport, error)
}

// New builds the MCP server for e. Input is not validated by mcp-go: its
// schema check would answer an out-of-range or mistyped value with a bare
// error text, while the engine answers it with a proMCP body (status failed,
// permission out_of_range) that says what to do next. Output schema
// validation is off too: a body that drifted from its schema must not turn a
// write that happened into an error the caller might act on.
func New(e *engine.Engine, opts Options) (*server.MCPServer, error) {
	if opts.Name == "" {
		opts.Name = "physmcpd"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Caller == nil {
		opts.Caller = func(context.Context) engine.Caller {
			return engine.Caller{Identity: "anonymous", Role: manifest.RoleNone}
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Profile == "" {
		opts.Profile = profiles.Full.Name
	}
	if opts.Approvals == nil {
		opts.Approvals = auth.NewApprovals(opts.Now)
	}
	surface, err := mcpcore.NewSurface(e, opts.Group, opts.Now)
	if err != nil {
		return nil, err
	}
	m := e.Manifest()
	about := map[string]any{"promcp_base": promcp.BaseVersion, "device_id": m.Device.ID, "physmcp_version": m.PhysMCPVersion}
	if opts.Group != "" {
		about["group"] = opts.Group
	}
	hooks := &server.Hooks{}
	filter := roleFilter(e, opts.Caller)
	s := server.NewMCPServer(opts.Name, opts.Version,
		server.WithToolCapabilities(opts.ToolsChange),
		// Subscriptions are served (resources.go); the list of resources
		// changes only with the tools.
		server.WithResourceCapabilities(true, opts.ToolsChange),
		// Refusals and device changes as log messages (logging.go).
		server.WithLogging(),
		server.WithHooks(hooks),
		server.WithRecovery(),
		server.WithInstructions(mcpcore.Instructions(m)+mcpcore.GroupNote(m, opts.Group)),
		server.WithExperimental(map[string]any{"promcp": about}),
		server.WithToolFilter(filter),
	)
	a := &adapter{e: e, opts: opts, m: m, surface: surface, approvals: opts.Approvals, server: s, fast: newFastReads(s, filter, hooks)}
	hooks.AddOnError(a.noteHidden)
	a.fast.ownErrorHooks = 1
	a.resources = newResources(a, s, hooks)
	e.OnDeviceEvent(a.logDeviceEvent)
	tools, fast, err := a.serverTools()
	if err != nil {
		return nil, err
	}
	s.AddTools(tools...)
	a.fast.setTools(fast)
	if opts.ToolsChange {
		a.followTools()
	}
	return s, nil
}

// serverTools are the surface's tools as mcp-go serves them, with their
// handlers, and those the fast path answers (fastread.go's setTools).
func (a *adapter) serverTools() (tools []server.ServerTool, fast map[string]bool, err error) {
	all, err := Tools(a.e)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]mcp.Tool{}
	for _, t := range all {
		byName[t.Name] = t
	}
	handlers := map[engine.ToolKind]server.ToolHandlerFunc{engine.ToolRead: a.read, engine.ToolDo: a.do, engine.ToolCanDo: a.canDo,
		engine.ToolStart: a.start, engine.ToolStatus: a.status, engine.ToolCancel: a.cancel, engine.ToolSequence: a.sequence,
		engine.ToolStream: a.stream}
	fast = map[string]bool{}
	for _, t := range a.surface.Tools() {
		st := server.ServerTool{Tool: byName[t.Name], Handler: a.logged(a.recovered(t.Kind, handlers[t.Kind]))}
		tools = append(tools, st)
		switch t.Kind {
		case engine.ToolRead, engine.ToolCanDo:
			fast[t.Name] = false
		case engine.ToolDo:
			fast[t.Name] = true // it may ask for a person's approval
		}
	}
	return tools, fast, nil
}

type adapter struct {
	e       *engine.Engine
	opts    Options
	m       *manifest.Manifest
	surface *mcpcore.Surface // the endpoint's tools; read_* and can_do
	// approvals signs the state that binds a person's approval to one call.
	approvals *auth.Approvals
	// resources are the device and its readings, with their subscriptions.
	resources *resources
	server    *server.MCPServer // for notifications outside mcp-go's handlers
	fast      *fastReads        // read_* over HTTP answered without mcp-go's request path (fastread.go)
}

// logged records every call at debug level (the engine logs refusals and
// writes itself) and calls that fail outright at warn, and tells the
// caller's session of a failed call (logging.go).
func (a *adapter) logged(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		res, err := h(ctx, req)
		if err != nil {
			a.opts.Logger.Warn("tool call failed", "tool", req.Params.Name, "err", err)
		} else {
			a.opts.Logger.Debug("tool call", "tool", req.Params.Name, "is_error", res.IsError, "elapsed", time.Since(start))
			a.logFailure(ctx, req.Params.Name, res)
		}
		return res, err
	}
}

func (a *adapter) read(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	resp, isError, err := a.surface.Read(ctx, a.opts.Caller(ctx), req.Params.Name, args, problem)
	if err != nil {
		return nil, err
	}
	return result(resp, isError)
}

func (a *adapter) do(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var dr promcp.DoRequest
	if problem == "" {
		dr.Value = args["value"]
		if k, ok := args["idempotency_key"]; ok {
			if key, isString := k.(string); isString {
				dr.IdempotencyKey = key
			} else {
				problem = "idempotency_key must be a string"
			}
		}
		var unknown []string
		for _, k := range slices.Sorted(maps.Keys(args)) {
			if k != "value" && k != "idempotency_key" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 && problem == "" {
			problem = fmt.Sprintf("unknown argument %s: %s takes value and idempotency_key", strings.Join(unknown, ", "), name)
		}
	}
	if problem != "" {
		return a.refused(ctx, name, args, dr.IdempotencyKey, "", problem)
	}
	return a.doCall(ctx, req, args, dr)
}

// refused answers an acting call refused before the engine saw it (its
// arguments, or a person's approval that does not hold), and tells the
// engine, which counts and audits it as any refused attempt to act.
func (a *adapter) refused(ctx context.Context, tool string, args map[string]any, key string, p promcp.Permission, reason string) (*mcp.CallToolResult, error) {
	a.e.NoteRefused(a.opts.Caller(ctx), tool, p, reason, args)
	resp := a.refusal(tool, key, reason)
	resp.Permission = p
	return result(resp, true)
}

// refusal is the failed do_* body for arguments the engine never sees:
// nothing was written and no key was recorded.
func (a *adapter) refusal(tool, key, reason string) promcp.DoResponse {
	if key == "" {
		key = promcp.NewUUID()
	}
	side := []string{}
	if c := a.surface.Capability(tool); c != nil && len(c.SideEffects) > 0 {
		side = append(side, c.SideEffects...)
	}
	return promcp.DoResponse{
		Status: promcp.StatusFailed, IdempotencyKey: key, SideEffects: side,
		Timestamp: promcp.Time(a.opts.Now()), Reason: reason + "; nothing was written", DeviceID: a.m.Device.ID,
	}
}

func (a *adapter) canDo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var failed error // this device's own can_do failed: there is no body
	local := func(ctx context.Context) (promcp.CapabilityReport, error) {
		rep, err := a.surface.CanDo(ctx, a.opts.Caller(ctx), args, problem)
		failed = err
		return rep, err
	}
	if a.opts.Router == nil {
		rep, err := local(ctx)
		if err != nil {
			return nil, err
		}
		return result(rep, false)
	}
	var meta map[string]any
	if req.Params.Meta != nil {
		meta = req.Params.Meta.AdditionalFields
	}
	rep, err := a.opts.Router.Route(ctx, args, meta, a.opts.Caller(ctx).Role, local)
	switch {
	case failed != nil:
		return nil, failed
	case err != nil:
		return mcp.NewToolResultError(err.Error()), nil
	}
	return result(rep, false)
}

// result carries one proMCP body as structuredContent and, for clients that
// only read text, as the same JSON in a text block.
func result(body any, isError bool) (*mcp.CallToolResult, error) {
	text, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return &mcp.CallToolResult{
		// text is never written to again: the text block shares it rather
		// than copying it (5 KB for a can_do).
		Content:              []mcp.Content{mcp.NewTextContent(unsafe.String(unsafe.SliceData(text), len(text)))},
		StructuredContent:    body,
		RawStructuredContent: text,
		IsError:              isError,
	}, nil
}
