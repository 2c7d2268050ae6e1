package mcpserver

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// recovered turns a panic anywhere below a tool handler into an isError
// result for that one call, with the body the tool's contract promises.
// mcp-go's WithRecovery (kept as a last resort) answers with a JSON-RPC
// error instead, which a client cannot tell from a transport failure; the
// engine already turns driver panics into failed transactions, so this is
// for bugs in the engine or the adapter themselves.
func (a *adapter) recovered(kind engine.ToolKind, h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			name := req.Params.Name
			a.opts.Logger.Error("tool handler panic recovered", "tool", name, "panic", r, "stack", string(debug.Stack()))
			problem := fmt.Sprintf("internal error in physmcpd (%v); this is a bug, please report it", r)
			switch kind {
			case engine.ToolDo:
				body := a.refusal(name, "", problem)
				body.Reason = problem + "; whether the device was written is unknown: read it before retrying"
				res, err = result(body, true)
			case engine.ToolRead:
				res, err = result(promcp.ReadResponse{Timestamp: promcp.Time(a.opts.Now()), Quality: promcp.QualityError,
					DeviceID: a.m.Device.ID, Detail: problem}, true)
			default:
				res, err = mcp.NewToolResultError(problem), nil
			}
		}()
		return h(ctx, req)
	}
}
