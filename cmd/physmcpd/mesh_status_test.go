//go:build !lite

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/mesh"
)

// mesh status tells the operator how far memberlist's health score slows
// this node's failure detection.
func TestMeshStatusShowsHealth(t *testing.T) {
	st := mesh.Status{Enabled: true, Self: mesh.Peer{NodeID: "node_1", Profile: "full"}, SizeEstimate: 1, PartitionState: mesh.PartitionNone}
	st.Partition.State = mesh.PartitionNone
	st.Timing.HeartbeatMs, st.Timing.SuspectWithinMs, st.Timing.SuspectAtLatestMs, st.Timing.DeadAfterMs = 1000, 3000, 8000, 2000
	for _, c := range []struct {
		health int
		want   string
	}{
		{0, "health score 0: failure detection at full speed\n"},
		{2, "health score 2: failure detection slowed 3×, a silent peer is suspected within 5000 ms (at the latest 10000 ms)\n"},
	} {
		st.Health, st.Slowdown = c.health, c.health+1
		var out strings.Builder
		printMeshStatus(&out, st, listPeers{}, time.Now())
		if !strings.Contains(out.String(), "heartbeat 1000 ms: suspected within 3000 ms (at the latest 8000 ms), dead 2000 ms later") || !strings.Contains(out.String(), c.want) {
			t.Errorf("health %d: mesh status lacks %q:\n%s", c.health, c.want, out.String())
		}
	}
}
