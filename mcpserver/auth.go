package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/promcp"
)

// CallerFrom resolves who is calling: the principal the HTTP middleware
// authenticated, else local (stdio and serial callers, who started the process).
func CallerFrom(local engine.Caller) func(ctx context.Context) engine.Caller {
	return func(ctx context.Context) engine.Caller {
		if p, ok := auth.PrincipalFrom(ctx); ok {
			return engine.Caller{Identity: p.Name, Role: p.Role}
		}
		return local
	}
}

// roleFilter lists only the tools the caller's role may call; mcp-go applies
// it at tools/call as well, so a hidden tool cannot be called either. Tools
// the engine does not serve (the conformance fixtures test/interop adds) are
// not the policy's to hide.
func roleFilter(e *engine.Engine, caller func(context.Context) engine.Caller) server.ToolFilterFunc {
	permits := RolePermits(e)
	return func(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
		role := caller(ctx).Role
		out := tools[:0:0]
		for _, t := range tools {
			if permits(t.Name, role) {
				out = append(out, t)
			}
		}
		return out
	}
}

// noteHidden tells the engine of a call of a tool this endpoint serves but
// the caller's role does not see, which mcp-go answers as not found (stdio,
// a serial line): the engine counts and audits it as the HTTP edge's 403 for
// the same call (which mcp-go never sees).
func (a *adapter) noteHidden(ctx context.Context, _ any, method mcp.MCPMethod, message any, err error) {
	req, ok := message.(*mcp.CallToolRequest)
	if !ok || method != mcp.MethodToolsCall || !errors.Is(err, server.ErrToolNotFound) {
		return
	}
	name, caller := req.Params.Name, a.opts.Caller(ctx)
	if a.server.GetTool(name) == nil || RolePermits(a.e)(name, caller.Role) {
		return // not this endpoint's, or not the role: no such tool here
	}
	args, _ := mcpcore.Arguments(req.Params.Arguments)
	a.e.NoteRefused(caller, name, promcp.PermissionInsufficient, roleRefusal(caller.Role, name), args)
}

// roleRefusal is the reason given for a call the caller's role may not make.
func roleRefusal(role manifest.Role, tool string) string {
	return fmt.Sprintf("role %s may not call %s", role, tool)
}

// RolePermits is engine.Permits for the HTTP edge, which refuses a call
// before it reaches the MCP server: a tool the engine does not serve (now:
// an aggregator's tools change) is left to the server to answer (not found).
func RolePermits(e *engine.Engine) func(tool string, role manifest.Role) bool {
	return func(tool string, role manifest.Role) bool {
		return !e.Serves(tool) || e.Permits(tool, role)
	}
}
