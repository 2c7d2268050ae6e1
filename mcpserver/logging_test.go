//go:build !lite

package mcpserver_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// logMessages collects the client's notifications/message, as JSON.
func logMessages(c *client.Client) <-chan map[string]any {
	ch := make(chan map[string]any, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != string(mcp.MethodNotificationMessage) {
			return
		}
		raw, _ := json.Marshal(n.Params)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		ch <- m
	})
	return ch
}

func nextLog(t *testing.T, ch <-chan map[string]any) (level string, data map[string]any) {
	t.Helper()
	select {
	case m := <-ch:
		if m["logger"] != mcpserver.LogName {
			t.Errorf("logger %v", m["logger"])
		}
		data, _ = m["data"].(map[string]any)
		return m["level"].(string), data
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/message within 5 s")
	}
	panic("unreachable")
}

func setLevel(t *testing.T, c *client.Client, level mcp.LoggingLevel) {
	t.Helper()
	req := mcp.SetLevelRequest{}
	req.Params.Level = level
	if err := c.SetLevel(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// legacyClient is an in-process client on the initialize handshake
// (protocol 2025-11-25), where logging/setLevel sets the session's level.
func legacyClient(t *testing.T, s *server.MCPServer) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClientWithOptions(s, client.WithLegacyProtocolOnly())
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	return c
}

func TestFailedCallLogMessage(t *testing.T) {
	for _, connect := range []struct {
		name string
		f    func(*testing.T, *server.MCPServer) *client.Client
	}{{"2025-11-25", legacyClient}, {"2026-07-28", func(t *testing.T, s *server.MCPServer) *client.Client { return inProcessClient(t, s) }}} {
		t.Run(connect.name, func(t *testing.T) {
			d := startTank(t, manifest.RoleOperator)
			failedCallLog(t, connect.f(t, d.s))
		})
	}
}

func failedCallLog(t *testing.T, c *client.Client) {
	logs := logMessages(c)
	call := func() {
		res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{
			Name: "do_inflow", Arguments: map[string]any{"value": 99, "idempotency_key": "k1"}}})
		if err != nil || !res.IsError {
			t.Fatalf("do_inflow 99: %v %+v", err, res)
		}
	}
	call() // the session's level is error (mcp-go's default): no message
	noLog(t, logs, 200*time.Millisecond)

	setLevel(t, c, mcp.LoggingLevelWarning)
	call()
	level, data := nextLog(t, logs)
	if level != "warning" || data["event"] != "call_failed" || data["tool"] != "do_inflow" || data["permission"] != "out_of_range" ||
		data["reason"] == "" || data["idempotency_key"] != "k1" {
		t.Errorf("refusal message %s %v", level, data)
	}
	// A call that acts is not a refusal.
	if _, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{
		Name: "do_pump", Arguments: map[string]any{"value": true}}}); err != nil {
		t.Fatal(err)
	}
	noLog(t, logs, 200*time.Millisecond)
}

func noLog(t *testing.T, ch <-chan map[string]any, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected log message %v", m)
	case <-time.After(d):
	}
}

// A device that stops answering, whose breaker opens and which comes back
// is told to every session at the level it asked for.
func TestDeviceLogMessages(t *testing.T) {
	m, p := loadDevice(t, tankManifest, tankPolicy)
	clk := testclock.New(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Now: clk.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	caller := engine.Caller{Identity: "test", Role: manifest.RoleOperator}
	s, err := mcpserver.New(e, mcpserver.Options{Logger: quietLogger(), Caller: func(context.Context) engine.Caller { return caller }})
	if err != nil {
		t.Fatal(err)
	}
	notice, errorsOnly := legacyClient(t, s), legacyClient(t, s)
	setLevel(t, notice, mcp.LoggingLevelNotice)
	setLevel(t, errorsOnly, mcp.LoggingLevelError)
	logs, errLogs := logMessages(notice), logMessages(errorsOnly)
	read := func() {
		clk.Advance(200 * time.Millisecond) // past the level's cache TTL
		if _, err := e.Read(context.Background(), caller, "read_level"); err != nil {
			t.Fatal(err)
		}
	}
	bus := buses["mb"].(interface{ SetOffline(bool) })
	bus.SetOffline(true)
	for range engine.BreakerThreshold {
		read()
	}
	bus.SetOffline(false)
	clk.Advance(engine.BreakerCooloff)
	read()

	tools := []any{"read_level", "read_pressure", "do_pump", "do_inflow"}
	for _, want := range []struct{ level, event, breaker string }{
		{"warning", "device_unreachable", "closed"},
		{"error", "device_breaker_open", "open"},
		{"notice", "device_reachable", "closed"},
	} {
		level, data := nextLog(t, logs)
		if level != want.level || data["event"] != want.event || data["breaker"] != want.breaker || data["device"] != "mb unit 1" ||
			!slices.Equal(data["tools"].([]any), tools) {
			t.Errorf("message %s %v, want %s %s", level, data, want.level, want.event)
		}
	}
	level, data := nextLog(t, errLogs)
	if msg, _ := data["error"].(string); level != "error" || data["event"] != "device_breaker_open" || !strings.Contains(msg, "offline") || data["retry_at"] == nil {
		t.Errorf("error-level session got %s %v", level, data)
	}
	noLog(t, errLogs, 200*time.Millisecond)
}
