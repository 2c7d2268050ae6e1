package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// MCP log messages (docs/resources.md#log-messages): a failed call to the
// session that made it, and a device that stops or starts answering to every
// session, each at the level the session set with logging/setLevel (mcp-go
// keeps the level per session; its default is error). Protocol 2026-07-28
// clients ask per request instead, so they get refusals only.

// LogName is the logger of physmcpd's MCP log messages.
const LogName = "physmcpd"

// notificationSettle is how long a call waits after its log message, so
// that mcp-go v1.2.1 writes it before the result over streamable HTTP
// rather than dropping it (docs/interop.md, "Known trap").
const notificationSettle = 20 * time.Millisecond

// failure is what a failed tool body says about why.
type failure struct {
	Status         string            `json:"status"`
	Permission     promcp.Permission `json:"permission"`
	Reason         string            `json:"reason"`
	IdempotencyKey string            `json:"idempotency_key"`
}

// logFailure tells the caller's session at warning level of a call whose
// result answers status failed: a refusal (by the input checks, the policy
// or the device, with the permission when there is one) or a device that
// could not be reached.
func (a *adapter) logFailure(ctx context.Context, tool string, res *mcp.CallToolResult) {
	if res == nil || !bytes.Contains(res.RawStructuredContent, []byte(`"failed"`)) {
		return
	}
	var f failure
	if json.Unmarshal(res.RawStructuredContent, &f) != nil || f.Status != string(promcp.StatusFailed) || !wantsLog(ctx, mcp.LoggingLevelWarning) {
		return
	}
	data := map[string]any{"event": "call_failed", "tool": tool, "reason": f.Reason}
	if f.Permission != "" {
		data["permission"] = f.Permission
	}
	if f.IdempotencyKey != "" {
		data["idempotency_key"] = f.IdempotencyKey
	}
	delivered, err := a.fast.notifyCallLog(ctx, mcp.NewLoggingMessageNotification(mcp.LoggingLevelWarning, LogName, data))
	if err == nil && !delivered {
		time.Sleep(notificationSettle)
	}
}

// wantsLog says whether the session (or, from protocol 2026-07-28, the
// request) in ctx asked for messages at level.
func wantsLog(ctx context.Context, level mcp.LoggingLevel) bool {
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.LogLevel != "" && level.ShouldSendTo(info.LogLevel)
	}
	s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithLogging)
	return ok && level.ShouldSendTo(s.GetLogLevel())
}

// deviceLevel is the level of each device change: a breaker that opens
// makes tools fail at once, a first failure may pass, a device back is news.
var deviceLevel = map[string]mcp.LoggingLevel{
	engine.DeviceUnreachable: mcp.LoggingLevelWarning,
	engine.DeviceBreakerOpen: mcp.LoggingLevelError,
	engine.DeviceReachable:   mcp.LoggingLevelNotice,
}

// logDeviceEvent tells every session of the endpoint that serves one of the
// device's tools.
func (a *adapter) logDeviceEvent(ev engine.DeviceEvent) {
	var tools []string
	for _, t := range ev.Health.Tools {
		if a.surface.Capability(t) != nil {
			tools = append(tools, t)
		}
	}
	if len(tools) == 0 {
		return
	}
	data := map[string]any{"event": "device_" + ev.Change, "device": ev.Health.Device, "bus": ev.Health.Bus,
		"breaker": ev.Health.State, "tools": tools, "at": promcp.Time(ev.At)}
	if ev.Health.LastError != "" {
		data["error"] = ev.Health.LastError
	}
	if !ev.Health.RetryAt.IsZero() && ev.Change == engine.DeviceBreakerOpen {
		data["retry_at"] = promcp.Time(ev.Health.RetryAt)
	}
	n := mcp.NewLoggingMessageNotification(deviceLevel[ev.Change], LogName, data)
	for _, id := range a.resources.subs.sessions() {
		// Not sent when the session's level is above it, or its channel
		// is full (a client not taking notifications).
		_ = a.fast.notifyLog(id, n)
	}
}
