package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// The tools a listed source gives at start-up are in the manifest the
// engine starts with, but were not there when the policy was read: the
// engine checks the policy's rules against each. A tool they cannot hold for
// (a rate rule on a read) is not served, blocked with the policy's file and
// line; the others follow their pattern's rules; names that apply to no tool
// are listed, and are gone from the list once a device offers a tool for them.
func TestPolicyOnToolsAdoptedAtStart(t *testing.T) {
	m, p := aggregatorUnder(t, `physmcp_policy_version: "0.1"
capabilities:
  "do_fan_*":
    rules: [{type: permission, require: [supervisor]}]
  "read_fan_*":
    rules: [{type: rate, max: 1/hour}]
  do_pump_speed:
    rules: [{type: permission, require: [admin]}]
`)
	m.Capabilities = adoptedCaps("dev1", "read_fan_speed", "do_fan_speed") // as adopt.Expand adds them
	src := &fakeSource{values: map[string]any{"read_fan_speed": 10.0}}
	e, err := engine.New(m, p, map[string]drivers.Bus{"dev1": src}, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })

	if names := toolNames(e); !slices.Equal(names, []string{"do_fan_speed", "can_do"}) {
		t.Errorf("tools %v; want read_fan_speed left out", names)
	}
	ns := e.Manifest().NotServed
	if len(ns) != 1 || ns[0].Capability.ToolName() != "read_fan_speed" ||
		!strings.HasPrefix(ns[0].Reason, "policy_mismatch: read_fan_speed of dev1 is not served: the policy's rules for it cannot hold for it: agg.policy.yml:6:") ||
		!strings.Contains(ns[0].Reason, "capabilities.read_fan_*.rules[0].type: a rate rule only applies to do_ tools") {
		t.Errorf("not served: %+v", ns)
	}
	ctx := context.Background()
	if r, _ := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 20.0, IdempotencyKey: "k1"}); r.Permission != promcp.PermissionInsufficient || src.writes != 0 {
		t.Errorf("an operator under the pattern's permission rule: %+v, %d writes", r, src.writes)
	}
	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	if r, err := e.Do(ctx, sup, "do_fan_speed", promcp.DoRequest{Value: 20.0, IdempotencyKey: "k2"}); err != nil || r.Status != promcp.StatusSuccess || src.writes != 1 {
		t.Errorf("a supervisor: %+v %v, %d writes", r, err, src.writes)
	}
	if got := e.PolicyUnmatched(); !slices.Equal(got, []string{"do_pump_speed"}) {
		t.Errorf("unmatched %q, want do_pump_speed", got)
	}

	bus := &manifest.Bus{Name: "dev2", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:10/mcp"}}
	if err := e.Adopt(bus, &fakeSource{values: map[string]any{}}, adoptedCaps("dev2", "read_pump_speed", "do_pump_speed"), nil); err != nil {
		t.Fatal(err)
	}
	if got := e.PolicyUnmatched(); len(got) != 0 {
		t.Errorf("unmatched after do_pump_speed was adopted: %q", got)
	}
	if !e.Permits("do_pump_speed", manifest.RoleAdmin) || e.Permits("do_pump_speed", manifest.RoleSupervisor) {
		t.Error("do_pump_speed does not follow its entry: admin only")
	}
}

// A device that leaves (Unadopt) and comes back keeps its tools' write
// history though the engine persists none (no Limits store, as the lite
// profile runs): its cooldown and the policy's rate rule still count the
// write made before it left.
func TestReadoptionKeepsWriteHistoryInMemory(t *testing.T) {
	m, p := aggregatorUnder(t, `physmcp_policy_version: "0.1"
capabilities:
  "do_fan_*":
    rules: [{type: rate, max: 1/hour}]
`)
	e, err := engine.New(m, p, map[string]drivers.Bus{}, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	bus := &manifest.Bus{Name: "dev1", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:9/mcp"}}
	ctx := context.Background()
	first := &fakeSource{values: map[string]any{"read_fan_speed": 10.0}}
	if err := e.Adopt(bus, first, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed"), nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 20.0, IdempotencyKey: "k1"}); r.Status != promcp.StatusSuccess {
		t.Fatalf("first write: %+v", r)
	}
	if err := e.Unadopt("dev1"); err != nil {
		t.Fatal(err)
	}
	again := &fakeSource{values: map[string]any{"read_fan_speed": 20.0}}
	if err := e.Adopt(bus, again, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed"), nil); err != nil {
		t.Fatal(err)
	}
	r, _ := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 30.0, IdempotencyKey: "k2"})
	if r.Status != promcp.StatusFailed || r.Permission != promcp.CooldownActive && r.Permission != promcp.RateLimited || again.writes != 0 {
		t.Fatalf("a write after the device came back, within the cooldown and the 1/hour rate: %+v, %d writes; want refused", r, again.writes)
	}
}

// aggregatorUnder is an aggregator's manifest that adopts bus dev1, and the
// policy text read under it (which must have no findings).
func aggregatorUnder(t *testing.T, policyText string) (*manifest.Manifest, *policy.Policy) {
	t.Helper()
	m, diags := manifest.Parse("agg.yml", []byte(`physmcp_version: "0.1"
profile: aggregator
device: {id: agg, type: aggregator, location: {zone: site}}
buses:
  dev1: {type: mcp, url: "http://127.0.0.1:9/mcp", adopt: {tools: all, group: zone_a}}
capabilities: []
`))
	if m == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	p, diags := policy.Parse("agg.policy.yml", []byte(policyText), m)
	if p == nil || len(diags) != 0 {
		t.Fatalf("policy: %v", diags)
	}
	return m, p
}
