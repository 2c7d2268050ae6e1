//go:build !lite

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/meshroute"
)

// quorumCheckManifest is a pump room of the quorum check test: a pump and a
// valve, and a guard gate whose read follows what was last written to it.
func quorumCheckManifest(id string, seeds string) string {
	return fmt.Sprintf(`physmcp_version: "0.1"
device: {id: %s, type: pump_room, location: {zone: plant}}
network:
  mesh: {enabled: true, seed_peers: [%s], bind_address: 127.0.0.1, bind_port: 0, mdns: false, heartbeat_interval_ms: 500, key_file: mesh.key}
buses:
  gpio: {type: gpio, chip: sim-chip, simulated: true}
capabilities:
  - {name: pump, kind: do, description: Run the transfer pump., binding: {bus: gpio, line: GPIO22, safe_level: low}, data_type: bool, semantic_tags: [pump], side_effects: [moves water], safe_value: false}
  - {name: valve, kind: do, description: Open the drain valve., binding: {bus: gpio, line: GPIO23, safe_level: low}, data_type: bool, semantic_tags: [valve], side_effects: [drains the tank], safe_value: false}
  - {name: gate, kind: do, description: Close the pump room's guard gate., binding: {bus: gpio, line: GPIO24, safe_level: low}, data_type: bool, semantic_tags: [gate], side_effects: [locks the pump room]}
  - {name: gate, kind: read, description: The guard gate is closed (its limit switch)., binding: {bus: gpio, line: GPIO25}, data_type: bool, semantic_tags: [gate], simulation: {follows: gate}}
`, id, seeds)
}

// quorumCheckPolicy: the pump needs a peer whose own pump_area_clear holds;
// the valve names a check no node defines.
const quorumCheckPolicy = `physmcp_policy_version: "0.1"
capabilities:
  do_pump:
    rules:
      - {type: quorum, min_peers: 2, check: pump_area_clear}
  do_valve:
    rules:
      - {type: quorum, min_peers: 2, check: valve_area_clear}
quorum_checks:
  pump_area_clear:
    conditions:
      - {capability: read_gate, op: "==", value: true, reason: "the guard gate is open"}
identity:
  local_role: operator
  mesh: {role: operator}
  providers:
    - type: static
      tokens:
        - {name: mesh_test, sha256: %x, role: operator}
`

// Two real processes: node_1's quorum write is refused while node_2's own
// check fails (its guard gate open) or names a check node_2 does not
// define, with node_2's reason and nothing on node_1's bus; once node_2's
// gate is closed the same write passes and reaches the bus once.
func TestMeshQuorumCheckProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs two processes")
	}
	bin := buildBinary(t, "")
	dir := meshDir(t)
	writeFile(t, dir, "policy.yml", fmt.Sprintf(quorumCheckPolicy, sha256.Sum256([]byte(meshToken))))
	a := startMeshProc(t, bin, dir, "node_1", quorumCheckManifest("node_1", ""))
	b := startMeshProc(t, bin, dir, "node_2", quorumCheckManifest("node_2", `"`+a.gossip+`"`))
	// node_2 vouches only for a requester it sees alive itself.
	for deadline := time.Now().Add(20 * time.Second); alivePeers(peersOf(t, a.endpoint)) < 1 || alivePeers(peersOf(t, b.endpoint)) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes do not list each other alive within 20 s")
		}
	}
	ca, cb := dialNode(t, a.endpoint), dialNode(t, b.endpoint)
	base := strings.TrimSuffix(a.endpoint, mcpserver.EndpointPath)
	busWrites := func() float64 {
		t.Helper()
		_, fams := scrape(t, base, meshToken)
		v, _ := lookup(fams, "physmcpd_bus_transactions_total", map[string]string{"bus": "gpio", "op": "write"})
		return v
	}
	do := func(c *client.Client, tool string) (status, permission, reason string, took time.Duration) {
		t.Helper()
		start := time.Now()
		r := answer(t, c, tool, map[string]any{"value": true})
		took = time.Since(start)
		s, _ := r["status"].(string)
		p, _ := r["permission"].(string)
		why, _ := r["reason"].(string)
		return s, p, why, took
	}

	// can_do says which check the peers will run (it counts, it does not vote).
	rep := answer(t, ca, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"pump"}, "action": "set", "value": true}})
	if cands, _ := rep["candidates"].([]any); len(cands) != 1 ||
		!strings.Contains(fmt.Sprint(cands[0].(map[string]any)["constraints"]), "quorum:map[check:pump_area_clear min_peers:2 peers:zone]") {
		t.Errorf("can_do on node_1: %v; want do_pump with constraints.quorum naming pump_area_clear", rep["candidates"])
	}

	before := busWrites()
	s, p, why, took := do(ca, "do_pump")
	if s != "failed" || p != "partition_no_quorum" || !strings.Contains(why, "not confirmed by node_2: quorum_check pump_area_clear: the guard gate is open: read_gate is false") {
		t.Errorf("do_pump with node_2's gate open: %s %s %q", s, p, why)
	}
	t.Logf("refused by node_2's check in %s: %s", took.Round(time.Millisecond), why)
	if s, p, why, _ := do(ca, "do_valve"); s != "failed" || p != "partition_no_quorum" || !strings.Contains(why, `node_2: unknown quorum_check "valve_area_clear"`) {
		t.Errorf("do_valve naming a check node_2 does not define: %s %s %q", s, p, why)
	}
	if w := busWrites() - before; w != 0 {
		t.Fatalf("refused quorum writes reached node_1's bus %v times", w)
	}

	if s, p, why, _ := do(cb, "do_gate"); s != "success" {
		t.Fatalf("closing node_2's gate: %s %s %q", s, p, why)
	}
	s, p, why, took = do(ca, "do_pump")
	if s != "success" {
		t.Fatalf("do_pump with node_2's gate closed: %s %s %q", s, p, why)
	}
	t.Logf("confirmed by node_2's check: the write took %s", took.Round(time.Millisecond))
	if w := busWrites() - before; w != 1 {
		t.Errorf("the confirmed quorum write reached node_1's bus %v times, want 1", w)
	}
}

// A vote request with a parameter this node does not know is refused, not
// confirmed without it: a newer requester may ask for more than this node
// checks.
func TestQuorumVoteRefusesUnknownParams(t *testing.T) {
	m, diags := manifest.Load("../../examples/mesh/greenhouse/physmcp.manifest.yml")
	if m == nil {
		t.Fatal(diags)
	}
	vote := meshMethods(m, "full", nil, nil, meshroute.New(nil, meshroute.Config{}), func(context.Context, string) error { return nil })[meshroute.VoteMethod]
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Name: "mesh:node_1", Method: auth.MethodMesh, Node: "node_1"})
	if _, err := vote(ctx, json.RawMessage(`{"requester": "node_1", "tool": "do_pump", "check": "pump_area_clear", "interlocks": ["door"]}`)); err == nil || !strings.Contains(err.Error(), `unknown field "interlocks"`) {
		t.Errorf("a vote with an unknown parameter: %v, want refused", err)
	}
	if v, err := vote(ctx, json.RawMessage(`{"requester": "node_1", "tool": "do_pump", "check": "pump_area_clear"}`)); err != nil || v.(meshroute.Vote).Confirm {
		t.Errorf("a vote before this node joined the mesh: %+v %v, want answered, not confirmed", v, err)
	}
}
