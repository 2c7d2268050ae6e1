//go:build !lite

package main

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
)

// meshRoutingPolicy lets mesh peers forward can_do (identity.mesh).
const meshRoutingPolicy = `physmcp_policy_version: "0.1"
identity:
  local_role: operator
  mesh: {role: operator}
  providers:
    - type: static
      tokens:
        - {name: mesh_test, sha256: %x, role: operator}
`

// BenchmarkMeshCanDo times a can_do that node_1 cannot serve and routes
// across a mesh of real physmcpd processes on loopback to the one node
// that can (zone "target"), and reports p50 and p99 (goal: p99 ≤ 200 ms
// with 20 nodes) and how long the mesh took to converge.
func BenchmarkMeshCanDo(b *testing.B) {
	bin := buildBinary(b, "")
	for _, n := range []int{5, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchMeshCanDo(b, bin, n) })
	}
}

func benchMeshCanDo(b *testing.B, bin string, n int) {
	dir := meshDir(b)
	writeFile(b, dir, "policy.yml", fmt.Sprintf(meshRoutingPolicy, sha256.Sum256([]byte(meshToken))))
	// PhysMCP's default max_peers (10) would keep a 20-node mesh apart.
	manifest := func(id, zone string, seeds []string) string {
		return strings.Replace(meshNodeManifest(id, zone, seeds, false, time.Second), "mdns:", "max_peers: 32, mdns:", 1)
	}
	start := time.Now()
	seed := startMeshProc(b, bin, dir, "node_1", manifest("node_1", "z1", nil))
	for i := 2; i <= n; i++ {
		zone := fmt.Sprintf("z%d", i%3)
		if i == n {
			zone = "target"
		}
		id := fmt.Sprintf("node_%d", i)
		startMeshProc(b, bin, dir, id, manifest(id, zone, []string{seed.gossip}))
	}
	for alivePeers(peersOf(b, seed.endpoint)) < n-1 {
		if time.Since(start) > 60*time.Second {
			b.Fatalf("%d nodes did not converge in 60 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	converged := time.Since(start)
	tr, err := transport.NewStreamableHTTP(seed.endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + meshToken}))
	if err != nil {
		b.Fatal(err)
	}
	c := dialMCP(b, tr)
	args := map[string]any{"intent": map[string]any{"semantic_tags": []any{"target"}, "action": "read"}}
	res, err := callTool(b, c, "can_do", args)
	if err != nil || !strings.Contains(fmt.Sprint(res.Content), fmt.Sprintf(`"device_id":"node_%d"`, n)) {
		b.Fatalf("can_do on node_1 does not find node_%d: %v %v", n, err, res)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := callTool(b, c, "can_do", args); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
	b.ReportMetric(float64(converged.Milliseconds()), "ms-start-to-converged")
}
