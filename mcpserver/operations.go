package mcpserver

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/promcp"
)

// The tools of start and sequence operations (docs/roadmap.md). Like do_*,
// the acting ones run detached from the request's cancellation: a start
// that has been recorded, or a sequence half done, must finish its answer.

func (a *adapter) start(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return act(a, ctx, req, mcpcore.StartRequest, func(r promcp.StartRequest) string { return r.IdempotencyKey },
		a.e.Start, func(r promcp.StartResponse) bool { return r.Status == promcp.OpFailed })
}

// act answers an acting operation tool (start_*, do_cancel_*, a sequence):
// its arguments parsed by parse and refused, with nothing acted on, when
// malformed; otherwise run by the engine detached from the request.
func act[Req, Resp any](a *adapter, ctx context.Context, req mcp.CallToolRequest,
	parse func(map[string]any) (Req, string), key func(Req) string,
	run func(context.Context, engine.Caller, string, Req) (Resp, error), failed func(Resp) bool) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var r Req
	if problem == "" {
		r, problem = parse(args)
	}
	if problem != "" {
		return a.refused(ctx, req.Params.Name, args, key(r), "", problem)
	}
	resp, err := run(context.WithoutCancel(ctx), a.opts.Caller(ctx), req.Params.Name, r)
	if err != nil {
		return nil, err
	}
	return result(resp, failed(resp))
}

// status answers read_status_*. While wait_ms holds the answer, a client
// that sent a progressToken gets notifications/progress (progress 0..1 of
// total 1, the state as the message) whenever progress has grown.
func (a *adapter) status(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var sr promcp.StatusRequest
	if problem == "" {
		sr, problem = mcpcore.StatusRequest(args)
	}
	if problem != "" {
		// the engine's answer for no such operation, with the point's unit, saying what is wrong
		resp, err := a.e.Status(ctx, a.opts.Caller(ctx), req.Params.Name, promcp.StatusRequest{}, nil)
		if err != nil {
			return nil, err
		}
		resp.OperationID, resp.Reason, resp.Detail = sr.OperationID, problem, problem
		return result(resp, true)
	}
	var progress func(promcp.StatusResponse)
	if meta := req.Params.Meta; meta != nil && meta.ProgressToken != nil {
		token, sent := meta.ProgressToken, -1.0
		srv := server.ServerFromContext(ctx)
		progress = func(s promcp.StatusResponse) {
			if srv == nil || s.Progress <= sent {
				return
			}
			sent = s.Progress
			a.fast.notifying(ctx)
			err := srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
				"progressToken": token, "progress": s.Progress, "total": 1, "message": string(s.State),
			})
			if err != nil {
				a.opts.Logger.Debug("progress notification not sent", "tool", req.Params.Name, "err", err)
			}
		}
	}
	resp, err := a.e.Status(ctx, a.opts.Caller(ctx), req.Params.Name, sr, progress)
	if err != nil {
		return nil, err
	}
	return result(resp, resp.State == promcp.OpUnknown)
}

func (a *adapter) cancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return act(a, ctx, req, mcpcore.CancelRequest, func(r promcp.CancelRequest) string { return r.IdempotencyKey },
		a.e.Cancel, func(r promcp.CancelResponse) bool { return r.Status == promcp.StatusFailed })
}

func (a *adapter) sequence(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return act(a, ctx, req, mcpcore.SequenceRequest, func(r promcp.SequenceRequest) string { return r.IdempotencyKey },
		a.e.Sequence, func(r promcp.SequenceResponse) bool { return r.Status == promcp.StatusFailed })
}
