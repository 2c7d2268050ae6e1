package mcpserver

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/promcp"
)

// The tools of start and sequence operations (docs/roadmap.md). Like do_*,
// the acting ones run detached from the request's cancellation: a start
// that has been recorded, or a sequence half done, must finish its answer.

func (a *adapter) start(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var sr promcp.StartRequest
	if problem == "" {
		sr, problem = mcpcore.StartRequest(args)
	}
	if problem != "" {
		return result(a.refusal(req.Params.Name, sr.IdempotencyKey, problem), true)
	}
	resp, err := a.e.Start(context.WithoutCancel(ctx), a.opts.Caller(ctx), req.Params.Name, sr)
	if err != nil {
		return nil, err
	}
	return result(resp, resp.Status == promcp.OpFailed)
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
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var cr promcp.CancelRequest
	if problem == "" {
		cr, problem = mcpcore.CancelRequest(args)
	}
	if problem != "" {
		return result(a.refusal(req.Params.Name, cr.IdempotencyKey, problem), true)
	}
	resp, err := a.e.Cancel(context.WithoutCancel(ctx), a.opts.Caller(ctx), req.Params.Name, cr)
	if err != nil {
		return nil, err
	}
	return result(resp, resp.Status == promcp.StatusFailed)
}

func (a *adapter) sequence(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	var sr promcp.SequenceRequest
	if problem == "" {
		sr, problem = mcpcore.SequenceRequest(args)
	}
	if problem != "" {
		return result(a.refusal(req.Params.Name, sr.IdempotencyKey, problem), true)
	}
	resp, err := a.e.Sequence(context.WithoutCancel(ctx), a.opts.Caller(ctx), req.Params.Name, sr)
	if err != nil {
		return nil, err
	}
	return result(resp, resp.Status == promcp.StatusFailed)
}
