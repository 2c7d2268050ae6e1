//go:build !lite

package mcpserver_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/syncbuf"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// auditedRig is the operations rig (do_*, start_*, do_cancel_*, a sequence)
// served to a caller of one role, its audit trail collected and its bus
// writes counted.
type auditedRig struct {
	s   *server.MCPServer
	bus *countingBus
	mu  sync.Mutex
	log []engine.AuditEntry
}

func newAuditedRig(t *testing.T, role manifest.Role) *auditedRig {
	t.Helper()
	m, diags := manifest.Load("../engine/testdata/operations.manifest.yml")
	if m == nil {
		t.Fatalf("manifest: %v", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	r := &auditedRig{bus: &countingBus{ModbusBus: buses["mb"].(drivers.ModbusBus)}}
	buses["mb"] = r.bus
	e, err := engine.New(m, nil, buses, engine.Options{Logger: quietLogger(), Audit: func(a engine.AuditEntry) {
		r.mu.Lock()
		r.log = append(r.log, a)
		r.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	caller := engine.Caller{Identity: "local", Role: role}
	if r.s, err = mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Caller: func(context.Context) engine.Caller { return caller }}); err != nil {
		t.Fatal(err)
	}
	return r
}

// lines are the audit lines of tool.
func (r *auditedRig) lines(tool string) []engine.AuditEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(r.log), func(a engine.AuditEntry) bool { return a.Tool != tool })
}

func callWith(t *testing.T, c *client.Client, tool string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	return c.CallTool(context.Background(), req)
}

// Over a stream (stdio, a serial line) a tool the caller's role does not see
// is answered as not found, as before, and its call is audited as the HTTP
// edge's 403 is: refused, permission_insufficient, "role R may not call T",
// with the arguments given; for every acting tool (do_*, start_*,
// do_cancel_*, a sequence). A tool nobody serves, and a read the role
// sees, leave no line; nothing is written.
func TestHiddenCallsAuditedOverStream(t *testing.T) {
	r := newAuditedRig(t, manifest.RoleViewer)
	c := streamClient(t, r.s)
	calls := map[string]map[string]any{
		"do_oven_setpoint":    {"value": 30.0, "idempotency_key": "v-do"},
		"start_oven_ramp":     {"value": 30.0, "idempotency_key": "v-start"},
		"do_cancel_oven_ramp": {"operation_id": "op-1"},
		"do_changeover":       {"idempotency_key": "v-seq"},
	}
	for tool, args := range calls {
		if res, err := callWith(t, c, tool, args); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%s: %+v %v, want not found", tool, res, err)
		}
	}
	if _, err := callWith(t, c, "do_nothing_here", map[string]any{"value": 1}); err == nil {
		t.Error("do_nothing_here answered")
	}
	if res, err := callWith(t, c, "read_valve_position", nil); err != nil || res.IsError {
		t.Fatalf("read_valve_position: %+v %v", res, err)
	}
	for tool, args := range calls {
		lines := r.lines(tool)
		if len(lines) != 1 {
			t.Errorf("%s: %d lines, want 1: %+v", tool, len(lines), lines)
			continue
		}
		a := lines[0]
		if a.Outcome != engine.OutcomeRefused || a.Status != "failed" || a.Permission != "permission_insufficient" ||
			a.Reason != "role viewer may not call "+tool || a.Caller != "local" || a.Role != manifest.RoleViewer {
			t.Errorf("%s: line %+v", tool, a)
		}
		for k, v := range args {
			if a.Arguments[k] != v {
				t.Errorf("%s: arguments %v, want %v", tool, a.Arguments, args)
			}
		}
	}
	if n := len(r.lines("do_nothing_here")) + len(r.lines("read_valve_position")); n != 0 {
		t.Errorf("%d lines for an unknown tool or a visible read", n)
	}
	if n := r.bus.writes.Load(); n != 0 {
		t.Errorf("%d writes", n)
	}
}

// An acting call refused before it acts is audited whoever refuses it: the
// adapter (arguments that do not parse) or the engine (start_*, do_cancel_* and sequence refusals, which
// were only logged).
func TestRefusedActsAudited(t *testing.T) {
	r := newAuditedRig(t, manifest.RoleOperator)
	c := streamClient(t, r.s)
	for _, call := range []struct {
		tool       string
		args       any
		outcome    string
		permission string
		reason     string
	}{
		{"do_valve_command", map[string]any{"value": 10.0, "bogus": 1.0}, engine.OutcomeFailed, "", "unknown argument bogus"},
		{"start_pump_run", map[string]any{"value": true, "duration_ms": "long"}, engine.OutcomeFailed, "", "duration_ms"},
		{"do_changeover", "now", engine.OutcomeFailed, "", "arguments must be a JSON object"},
		{"start_oven_ramp", map[string]any{"value": 500.0, "idempotency_key": "hot"}, engine.OutcomeRefused, "out_of_range", "outside the range"},
		{"do_cancel_oven_ramp", map[string]any{"operation_id": "nope", "idempotency_key": "c1"}, engine.OutcomeFailed, "", "no operation"},
	} {
		res, err := callWith(t, c, call.tool, call.args)
		if err != nil || !res.IsError {
			t.Errorf("%s: %+v %v, want a failed answer", call.tool, res, err)
		}
		lines := r.lines(call.tool)
		if len(lines) != 1 {
			t.Errorf("%s: %d lines, want 1: %+v", call.tool, len(lines), lines)
			continue
		}
		a := lines[0]
		if a.Outcome != call.outcome || a.Status != "failed" || string(a.Permission) != call.permission || !strings.Contains(a.Reason, call.reason) ||
			a.Caller != "local" || a.Role != manifest.RoleOperator {
			t.Errorf("%s: line %+v", call.tool, a)
		}
		if args, ok := call.args.(map[string]any); ok {
			if key, _ := args["idempotency_key"].(string); a.Key != key || a.Arguments["value"] != args["value"] {
				t.Errorf("%s: line %+v, want the arguments %v", call.tool, a, args)
			}
		} else if a.Arguments != nil && len(a.Arguments) != 0 {
			t.Errorf("%s: arguments %v from arguments that are not an object", call.tool, a.Arguments)
		}
	}
	if n := r.bus.writes.Load(); n != 0 {
		t.Errorf("%d writes", n)
	}
}

// A do_* that carries an approval's state the server did not issue is
// refused (requires_human_approval) and audited. Sent raw: mcp-go's client
// sends only the states it was given.
func TestForgedApprovalAudited(t *testing.T) {
	r := newAuditedRig(t, manifest.RoleOperator)
	var out syncbuf.Buffer
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"do_pump","arguments":{"value":true,"idempotency_key":"k-forged"},"requestState":"forged"}}` + "\n"
	if err := mcpserver.ServeStream(context.Background(), r.s, strings.NewReader(in), &out, mcpserver.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "requires_human_approval") {
		t.Fatalf("a forged approval state: %s", out.String())
	}
	lines := r.lines("do_pump")
	if len(lines) != 1 || lines[0].Outcome != engine.OutcomeRefused || lines[0].Permission != "requires_human_approval" || lines[0].Key != "k-forged" ||
		!strings.Contains(lines[0].Reason, "ask again without requestState") || lines[0].Arguments["value"] != true {
		t.Errorf("do_pump with a forged state: lines %+v", lines)
	}
	if n := r.bus.writes.Load(); n != 0 {
		t.Errorf("%d writes", n)
	}
}
