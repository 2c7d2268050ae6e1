//go:build !lite

package mcpserver_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

func operationsServer(t *testing.T) *server.MCPServer {
	t.Helper()
	m, diags := manifest.Load("../engine/testdata/operations.manifest.yml")
	if m == nil {
		t.Fatalf("manifest: %v", diags)
	}
	e := simEngine(t, m, nil, nil)
	op := engine.Caller{Identity: "local", Role: manifest.RoleOperator}
	s, err := mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Caller: func(context.Context) engine.Caller { return op }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOperationToolsOverHTTP starts a ramp, waits for it with wait_ms and a
// progressToken, and gets progress notifications that only grow; every
// answer matches its tool's outputSchema.
func TestOperationToolsOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var progress []float64
	c := httpClient(t, operationsServer(t))
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p, ok := n.Params.AdditionalFields["progress"].(float64); ok && n.Params.AdditionalFields["progressToken"] == "tok" {
			progress = append(progress, p)
		}
	})
	tools, s := listTools(t, c)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"start_oven_ramp", "read_status_oven_ramp", "do_cancel_oven_ramp", "do_changeover"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list lacks %s: %v", want, names)
		}
	}
	started := s.call("start_oven_ramp", map[string]any{"value": 24, "idempotency_key": "ramp"}, false)
	id := started["operation_id"].(string)

	req := mcp.CallToolRequest{}
	req.Params.Name = "read_status_oven_ramp"
	req.Params.Arguments = map[string]any{"operation_id": id, "wait_ms": 10000}
	req.Params.Meta = &mcp.Meta{ProgressToken: "tok"}
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	st := res.StructuredContent.(map[string]any)
	if st["state"] != "succeeded" || st["progress"] != 1.0 {
		t.Fatalf("status after waiting: %v", st)
	}
	mu.Lock()
	got := slices.Clone(progress)
	mu.Unlock()
	if len(got) < 3 {
		t.Fatalf("progress notifications %v: want at least 3", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("progress notifications %v: each must be greater than the one before (MCP)", got)
		}
	}
	s.call("read_status_oven_ramp", map[string]any{"operation_id": id}, false)
	s.call("read_status_oven_ramp", map[string]any{"operation_id": "nope"}, true)
	s.call("do_cancel_oven_ramp", map[string]any{"operation_id": id}, false)
	seq := s.call("do_changeover", map[string]any{"idempotency_key": "seq"}, true)
	if seq["outcome"] != "compensated" {
		t.Fatalf("sequence: %v", seq)
	}
	s.call("start_oven_ramp", map[string]any{"value": 500}, true)
}

// TestStreamTool: stream_* subscribes the session (updates arrive as
// resources/updated with the reading), refuses a pace finer than the
// manifest's, and a second call replaces the first subscription.
func TestStreamTool(t *testing.T) {
	m, p := loadDevice(t, "../examples/roadmap/physmcp.manifest.yml", "../examples/roadmap/physmcp.policy.yml")
	e := simEngine(t, m, p, nil)
	op := engine.Caller{Identity: "local", Role: manifest.RoleOperator}
	s, err := mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Group: "process", Caller: func(context.Context) engine.Caller { return op }})
	if err != nil {
		t.Fatal(err)
	}
	// a session with its GET stream open (protocol 2025-11-25), where updates go
	c := httpConnect(t, s, []transport.StreamableHTTPCOption{transport.WithContinuousListening()}, client.WithLegacyProtocolOnly())
	got := make(chan map[string]any, 64)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/resources/updated" {
			select {
			case got <- n.Params.AdditionalFields:
			default:
			}
		}
	})
	_, sess := listTools(t, c)
	if bad := sess.call("stream_oven_temperature", map[string]any{"deadband": 0.05}, true); bad["status"] != "failed" {
		t.Fatalf("finer deadband: %v", bad)
	}
	if bad := sess.call("stream_oven_temperature", map[string]any{"interval_ms": 50}, true); bad["status"] != "failed" {
		t.Fatalf("shorter interval: %v", bad)
	}
	sub := sess.call("stream_oven_temperature", map[string]any{}, false)
	uri := mcpserver.ReadingURI("curing_oven_01", "oven_temperature")
	if sub["status"] != "subscribed" || sub["resource_uri"] != uri || sub["interval_ms"] != 200.0 || sub["first"] == nil {
		t.Fatalf("stream: %v", sub)
	}
	for range 2 {
		select {
		case n := <-got:
			if n["uri"] != uri {
				t.Fatalf("update for %v", n["uri"])
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no resources/updated notification")
		}
	}
	if again := sess.call("stream_oven_temperature", map[string]any{"interval_ms": 500, "deadband": 0.5}, false); again["interval_ms"] != 500.0 || again["deadband"] != 0.5 {
		t.Fatalf("second stream: %v", again)
	}
}
