//go:build !lite

package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// fuzzDevice is one example device served on simulated buses, with the
// simulator controls the fuzzer checks after every input.
type fuzzDevice struct {
	m     *manifest.Manifest
	buses map[string]drivers.Bus
	// tools are the do_* tools and can_do of each endpoint (group).
	tools []fuzzTool
}

type fuzzTool struct {
	s    *server.MCPServer
	name string
}

// The fuzz clock moves on with every input, so cooldowns and rate limits
// clear and writes keep happening, and time windows open and close.
func fuzzSetup(f *testing.F, clk *testclock.Clock, manifestPath, policyPath string) *fuzzDevice {
	m, diags := manifest.Load(manifestPath)
	if m == nil {
		f.Fatal(diags)
	}
	p, diags := policy.Load(policyPath, m)
	if p == nil {
		f.Fatal(diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), true)
	if err != nil {
		f.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Now: clk.Now, Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	// The most powerful caller there is, who approves everything: the
	// engine's checks alone must keep every write inside the manifest.
	admin := engine.Caller{Identity: "fuzz", Role: manifest.RoleAdmin, Approve: func(context.Context, engine.ApprovalRequest) (engine.Approval, error) {
		return engine.Approval{Approved: true}, nil
	}}
	d := &fuzzDevice{m: m, buses: buses}
	groups := []string{""}
	for _, c := range m.Capabilities {
		if c.Group != "" && !slices.Contains(groups, c.Group) {
			groups = append(groups, c.Group)
		}
	}
	if len(groups) > 1 {
		groups = groups[1:]
	}
	for _, g := range groups {
		s, err := mcpserver.New(e, mcpserver.Options{Logger: quietLogger(), Group: g, Now: clk.Now,
			Caller: func(context.Context) engine.Caller { return admin }})
		if err != nil {
			f.Fatal(err)
		}
		tools, err := mcpserver.GroupTools(e, g)
		if err != nil {
			f.Fatal(err)
		}
		for _, t := range tools {
			if !strings.HasPrefix(t.Name, "read_") {
				d.tools = append(d.tools, fuzzTool{s: s, name: t.Name})
			}
		}
	}
	return d
}

// checkInRange fails when any do capability's value in the simulated device
// lies outside what the manifest allows.
func (d *fuzzDevice) checkInRange(t *testing.T, input string) {
	for _, c := range d.m.Capabilities {
		if c.Kind != manifest.KindDo {
			continue
		}
		v := d.buses[c.Binding.Bus].(interface{ Value(string) any }).Value(c.Name)
		switch c.DataType {
		case manifest.TypeFloat, manifest.TypeInt:
			x, ok := drivers.AsFloat(v)
			if !ok || math.IsNaN(x) || *c.Range.Min > x || x > *c.Range.Max {
				t.Fatalf("after %s: %s holds %v, outside its range %s", input, c.ToolName(), v, c.Range)
			}
		case manifest.TypeBool:
			if _, ok := v.(bool); !ok {
				t.Fatalf("after %s: %s holds %v", input, c.ToolName(), v)
			}
		case manifest.TypeEnum:
			if s, ok := v.(string); !ok || !slices.Contains(c.EnumValues, s) {
				t.Fatalf("after %s: %s holds %v", input, c.ToolName(), v)
			}
		}
	}
}

// FuzzToolArguments sends arbitrary JSON arguments to every do_* tool and
// can_do of both example devices through the MCP server's message handler.
// Nothing may panic, every call must answer with a result (a refusal is a
// result), and no simulated register may ever hold a value outside the
// manifest's range.
func FuzzToolArguments(f *testing.F) {
	clk := testclock.New(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	devices := []*fuzzDevice{
		fuzzSetup(f, clk, exampleManifest, examplePolicy),
		fuzzSetup(f, clk, "../examples/pump-skid/physmcp.manifest.yml", "../examples/pump-skid/physmcp.policy.yml"),
	}
	var tools []fuzzTool
	for _, d := range devices {
		tools = append(tools, d.tools...)
	}
	for i := range tools {
		for _, args := range []string{
			`{"value": 21.5}`, `{"value": 1e308}`, `{"value": -1e-320}`, `{"value": true}`, `{"value": "auto"}`,
			`{"value": 35.0000001, "idempotency_key": "k"}`, `{"value": null}`, `[]`, `{"value": {"value": 1}}`,
			`{"intent": {"semantic_tags": ["heating"], "action": "set", "target": "heater_setpoint", "value": 99}}`,
			`{"intent": {"semantic_tags": ["pump"], "action": "toggle"}, "scope": ["do_pump_run"]}`,
		} {
			f.Add(uint8(i), args)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, args string) {
		if !json.Valid([]byte(args)) {
			return // not a JSON-RPC message at all; the transport rejects it
		}
		tool := tools[int(which)%len(tools)]
		clk.Advance(7 * time.Minute)
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool.name, args)
		reply := tool.s.HandleMessage(context.Background(), json.RawMessage(msg))
		out, err := json.Marshal(reply)
		if err != nil {
			t.Fatalf("%s %s: reply does not encode: %v", tool.name, args, err)
		}
		if strings.Contains(string(out), "panic") || strings.Contains(string(out), "internal error") {
			t.Fatalf("%s %s: %s", tool.name, args, out)
		}
		var isObject map[string]any
		if json.Unmarshal([]byte(args), &isObject) == nil && !strings.Contains(string(out), `"result"`) {
			t.Fatalf("%s %s: an object of arguments must get a tool result, got %s", tool.name, args, out)
		}
		for _, d := range devices {
			d.checkInRange(t, tool.name+" "+args)
		}
	})
}
