package mcpserver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
	"github.com/physmcp/physmcpd/promcp"
)

// stream answers stream_* (docs/roadmap.md): it subscribes the session to
// the reading's resource through the same subscriptions as
// resources/subscribe (one engine.Watch, forwarded as
// notifications/resources/updated), with the pace the caller asks for,
// never faster than the manifest's. A second stream_* of the same reading
// replaces the first; the session's bound on subscriptions applies.
func (a *adapter) stream(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var c *manifest.Capability
	for _, t := range a.surface.Tools() {
		if t.Name == req.Params.Name {
			c = t.Capability
		}
	}
	if c == nil {
		return nil, fmt.Errorf("%w %q", engine.ErrUnknownTool, req.Params.Name)
	}
	uri := ReadingURI(a.m.Device.ID, c.Name)
	deadband, interval := c.ChangeDeadband(), c.MinUpdateInterval()
	resp := promcp.StreamResponse{Status: promcp.StreamFailed, ResourceURI: uri, Unsubscribe: "resources/unsubscribe with uri " + uri,
		Timestamp: promcp.Time(a.opts.Now()), DeviceID: a.m.Device.ID}
	fail := func(format string, args ...any) (*mcp.CallToolResult, error) {
		resp.Reason = fmt.Sprintf(format, args...)
		resp.Deadband, resp.IntervalMs = deadband, int(interval.Milliseconds())
		return result(resp, true)
	}
	args, problem := mcpcore.Arguments(req.Params.Arguments)
	if problem != "" {
		return fail("%s", problem)
	}
	for k, v := range args {
		f, ok := v.(float64)
		switch {
		case k != "deadband" && k != "interval_ms":
			return fail("unknown argument %s: %s takes deadband and interval_ms", k, req.Params.Name)
		case !ok || f < 0 || math.IsInf(f, 0):
			return fail("%s must be a number >= 0", k)
		case k == "deadband" && !c.IsNumeric():
			return fail("deadband applies to numeric readings; %s is %s", c.Name, c.DataType)
		case k == "deadband" && f < deadband:
			return fail("deadband %g is below the manifest's %g for %s: a stream may be coarser, never finer", f, deadband, c.Name)
		case k == "deadband":
			deadband = f
		case f != math.Trunc(f) || time.Duration(f)*time.Millisecond < interval:
			return fail("interval_ms must be a whole number of at least %d (the manifest's min_update_interval_ms)", interval.Milliseconds())
		default:
			interval = time.Duration(f) * time.Millisecond
		}
	}
	session := server.ClientSessionFromContext(ctx)
	if session == nil || session.SessionID() == "" {
		return fail("this client has no MCP session to send updates to (MCP 2026-07-28 is sessionless): open subscriptions/listen naming %s to receive them", uri)
	}
	w, err := a.e.Watch(ctx, a.opts.Caller(ctx), c.ToolName(), engine.WatchOptions{Deadband: deadband, MinInterval: interval})
	if err != nil {
		return fail("%v", err)
	}
	first := w.First
	a.resources.subs.remove(session.SessionID(), uri)
	if err := a.resources.subs.add(session, uri, w); err != nil {
		return fail("%v", err)
	}
	resp.Status, resp.First, resp.Deadband = promcp.StreamSubscribed, &first, deadband
	resp.IntervalMs = int(interval.Milliseconds())
	resp.RateHz = 1000 / float64(resp.IntervalMs)
	return result(resp, false)
}
