//go:build !lite

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshroute"
	"github.com/physmcp/physmcpd/promcp"
)

// dialNode is an operator's MCP client of one node.
func dialNode(t testing.TB, endpoint string) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + meshToken}))
	if err != nil {
		t.Fatal(err)
	}
	return dialMCP(t, tr)
}

// canDo calls can_do with req's arguments and _meta and decodes the report.
func canDo(t testing.TB, c *client.Client, req mcp.CallToolRequest) (promcp.CapabilityReport, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req.Params.Name = "can_do"
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var rep promcp.CapabilityReport
	if !res.IsError {
		if err := json.Unmarshal([]byte(res.Content[0].(mcp.TextContent).Text), &rep); err != nil {
			t.Fatalf("can_do: %v: %v", err, res.Content)
		}
	}
	return rep, res
}

func blockedOf(rep promcp.CapabilityReport, device string) *promcp.Blocked {
	for i := range rep.Blocked {
		if rep.Blocked[i].DeviceID == device {
			return &rep.Blocked[i]
		}
	}
	return nil
}

// Five real processes with identity.mesh: node_1 routes a can_do to the
// only node that serves it (node_4), the orchestrator calls the tool at the
// endpoint the candidate names, a hung node_4 (SIGSTOP) never holds can_do
// past 500 ms, a killed one is reported offline, and a plain client may not
// pose as a peer.
func TestMeshRoutingProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs five processes")
	}
	const hb = time.Second
	bin := buildBinary(t, "")
	dir := meshDir(t)
	writeFile(t, dir, "policy.yml", fmt.Sprintf(meshRoutingPolicy, sha256.Sum256([]byte(meshToken))))
	zones := []string{"north", "north", "south", "target", "south"}
	a := startMeshProc(t, bin, dir, "node_1", meshNodeManifest("node_1", zones[0], nil, false, hb))
	procs := []*meshProc{a}
	for i := 2; i <= 5; i++ {
		id := fmt.Sprintf("node_%d", i)
		procs = append(procs, startMeshProc(t, bin, dir, id, meshNodeManifest(id, zones[i-1], []string{a.gossip}, false, hb)))
	}
	d := procs[3]
	for deadline := time.Now().Add(30 * time.Second); alivePeers(peersOf(t, a.endpoint)) < 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node_1 does not list 4 alive peers within 30 s")
		}
	}

	ca := dialNode(t, a.endpoint)
	var ask mcp.CallToolRequest
	ask.Params.Arguments = map[string]any{"intent": map[string]any{"semantic_tags": []any{"target"}, "action": "read"}}
	rep, _ := canDo(t, ca, ask)
	if len(rep.Candidates) != 1 || rep.Candidates[0].DeviceID != "node_4" || rep.Candidates[0].Endpoint != d.endpoint || rep.Candidates[0].Capability != "read_target_temperature" {
		t.Fatalf("can_do on node_1: candidates %+v, want node_4's read_target_temperature at %s", rep.Candidates, d.endpoint)
	}
	if m := rep.Metadata.MeshMetadata; m == nil || m.CoordinatorNode != "node_1" || m.PeersConsulted < 1 || m.ResponsesReceived != m.PeersConsulted ||
		m.ResponsesDroppedLate != 0 || m.MeshSizeEstimate != 5 || m.PartitionState != "none" {
		t.Errorf("mesh metadata %+v", rep.Metadata.MeshMetadata)
	}

	// The orchestrator calls the tool where the candidate says.
	cd := dialNode(t, d.endpoint)
	if res, err := callTool(t, cd, "read_target_temperature", nil); err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.Content), "20") {
		t.Errorf("read_target_temperature at node_4's endpoint: %v %+v", err, res)
	}

	// A plain client (an operator token, no mesh credential) posing as a peer.
	forged := ask
	forged.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{meshroute.MetaKey: map[string]any{
		"query_id": "forged-1", "root_query_id": "forged-1", "coordinator": "node_1", "ttl": 2, "visited": []string{"node_1"}, "budget_ms": 400}}}
	if _, res := canDo(t, cd, forged); !res.IsError {
		t.Errorf("a forwarded can_do without a mesh credential was answered: %v", res.Content)
	}
	meshPeerAsksOnlyAsItself(t, dir, d, forged)

	// node_4 hung: can_do still answers within the 500 ms budget (+150 ms for
	// scheduling on a loaded host), reporting it late, until it is suspected.
	// The time is node_1's own (its log of the call): the round trip from
	// this test also holds whatever a loaded host stalls the test by.
	hang(t, d.cmd.Process)
	hung := time.Now()
	var worst time.Duration
	late := 0
	for range 5 {
		t0 := time.Now()
		rep, _ := canDo(t, ca, ask)
		took := time.Since(t0)
		worst = max(worst, took)
		if rep.Metadata.MeshMetadata != nil {
			late += rep.Metadata.ResponsesDroppedLate
		}
		if b := blockedOf(rep, "node_4"); b == nil || b.Permission != "source_unreachable" || !strings.Contains(b.Reason, "device_offline") {
			t.Errorf("hung node_4 not blocked source_unreachable/device_offline: blocked %+v, candidates %+v", rep.Blocked, rep.Candidates)
		}
	}
	// Each call's line is in node_1's stderr before its answer, but this
	// test copies that pipe into the log concurrently.
	var calls []time.Duration
	answered := time.Now()
	awaitMesh(t, []*meshProc{a}, answered, 2, func() bool {
		calls = canDoTimes(t, a, hung, answered)
		return len(calls) >= 5
	}, func() string {
		return fmt.Sprintf("node_1 logged %d can_do calls while node_4 was stopped, want 5", len(calls))
	})
	t.Logf("node_4 stopped: worst of 5 can_do on node_1 took %s there (%d logged), %s here; responses_dropped_late summed %d",
		slices.Max(append(calls, 0)).Round(time.Millisecond), len(calls), worst.Round(time.Millisecond), late)
	if len(calls) != 5 {
		t.Errorf("node_1 logged %d can_do calls while node_4 was stopped, want 5", len(calls))
	} else if held := slices.Max(calls); held > 650*time.Millisecond {
		t.Errorf("a hung peer held can_do %s on node_1 (budget 500 ms + 150 ms scheduling slack)", held)
	}
	if late == 0 {
		t.Errorf("no can_do counted the hung node_4 in responses_dropped_late")
	}
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); peerState(peersOf(t, a.endpoint), "node_4") != mesh.Alive; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node_4 is not alive again on node_1 within 30 s of SIGCONT")
		}
	}

	// A node that probed the hung node_4 may come out of it with a health
	// score s (memberlist's Lifeguard, docs/mesh.md) above 0 when it was slow
	// itself: for about s heartbeats it waits s+1 heartbeats, not one, to
	// suspect a silent peer, so node_4's death would be reported late.
	// Wait for them to recover; on a host too loaded for that, bound the
	// death by the slowest of them.
	survivors := []*meshProc{procs[0], procs[1], procs[2], procs[4]}
	recovered := time.Now()
	afterHang := healthScores(t, survivors)
	atKill := afterHang
	for deadline := recovered.Add(20 * time.Second); slices.Max(atKill) > 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		atKill = healthScores(t, survivors)
	}
	t.Logf("health scores of node_1,2,3,5 when node_4 was alive again: %v; %v %s later", afterHang, atKill, time.Since(recovered).Round(time.Millisecond))

	// node_4 killed: reported offline once the mesh declares it dead.
	killed := time.Now()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	tm := mesh.TimingFor(hb, 5)
	slowest := tm.Slowed(mesh.MaxHealthScore)
	seen := slices.Clone(atKill)
	var blocked, reported time.Duration
	for ; reported == 0; time.Sleep(100 * time.Millisecond) {
		for i, h := range healthScores(t, survivors) {
			seen[i] = max(seen[i], h)
		}
		rep, _ := canDo(t, ca, ask)
		if b := blockedOf(rep, "node_4"); b != nil && b.Permission == "source_unreachable" && strings.Contains(b.Reason, "device_offline") {
			if blocked == 0 {
				blocked = time.Since(killed)
			}
			if strings.Contains(b.Reason, "dead in the mesh") {
				reported = time.Since(killed)
			}
		}
		// A survivor that missed the news of the death gets it at its
		// next full sync.
		if time.Since(killed) > slowest.SuspectAtLatest+slowest.DeadAfter+tm.FullSync {
			t.Fatalf("can_do on node_1 does not report the killed node_4 dead: %+v", rep.Blocked)
		}
	}
	// The first survivor to declare node_4 dead did so on its own
	// suspicion's timer (a death is gossiped only once declared), DeadAfter
	// after the first suspicion, which came when a probe of node_4 failed:
	// at the latest SuspectAtLatest after the kill at the prober's health
	// score. The survivors' own times of the declaration are compared with
	// it, not when this test, which a loaded host stalls as well, saw it.
	dead := time.Duration(0)
	for _, p := range survivors {
		if q, ok := peerOf(peersOf(t, p.endpoint), "node_4"); ok && q.State == mesh.Dead && (dead == 0 || q.Since.Sub(killed) < dead) {
			dead = q.Since.Sub(killed)
		}
	}
	at := tm.Slowed(slices.Max(seen))
	t.Logf("node_4 killed: can_do on node_1 reports it blocked (source_unreachable, device_offline) after %s, dead in the mesh after %s; first declared dead after %s (bound %s at health score %d; scores at the kill %v, highest until then %v)",
		blocked.Round(time.Millisecond), reported.Round(time.Millisecond), dead.Round(time.Millisecond), at.SuspectAtLatest+at.DeadAfter, slices.Max(seen), atKill, seen)
	if dead <= 0 || dead > at.SuspectAtLatest+at.DeadAfter {
		t.Errorf("node_4 first declared dead after %s, bound %s (suspected at the latest %s at health score %d, dead %s later)",
			dead, at.SuspectAtLatest+at.DeadAfter, at.SuspectAtLatest, slices.Max(seen), at.DeadAfter)
	}
}

// canDoRE is a node's debug log line of a can_do call and how long it took.
var canDoRE = regexp.MustCompile(`(?m)^time=(\S+) level=DEBUG msg="tool call" tool=can_do is_error=\S+ elapsed=(\S+)$`)

// canDoTimes is how long each can_do call p logged between from and to took.
func canDoTimes(t testing.TB, p *meshProc, from, to time.Time) []time.Duration {
	t.Helper()
	var took []time.Duration
	for _, m := range canDoRE.FindAllStringSubmatch(p.log.String(), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s logged a call at %q: %v", p.id, m[1], err)
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("%s logged a call that took %q: %v", p.id, m[2], err)
		}
		if at.After(from) && !at.After(to) {
			took = append(took, d)
		}
	}
	return took
}

// healthScores is each node's memberlist health score (mesh_status).
func healthScores(t testing.TB, nodes []*meshProc) []int {
	t.Helper()
	scores := make([]int, len(nodes))
	for i, p := range nodes {
		var st mesh.Status
		if err := (rpcClient{url: p.endpoint, token: meshToken, http: &http.Client{Timeout: 5 * time.Second}}).call("physmcp/mesh_status", &st); err != nil {
			t.Fatal(err)
		}
		if st.Slowdown != st.Health+1 {
			t.Fatalf("%s: mesh_status health_score %d, detection_slowdown %d", p.id, st.Health, st.Slowdown)
		}
		scores[i] = st.Health
	}
	return scores
}
