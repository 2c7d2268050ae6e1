package mesh

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// A node that missed every gossip of a join (datagrams lost while it could
// not receive them) lists the new node within PhysMCP's convergence goal of
// its start: its first full sync (within 2·FullSync), or a peer's with it,
// brings the member list. With
// memberlist's 30 s LAN default the first full sync came 30 to 60 s after
// the start (TestMeshFiveProcesses: "5 nodes did not converge within 15 s").
func TestMissedJoinIsRepairedByFullSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		took, problem := missJoin(t)
		if problem != "" {
			t.Error(problem)
		}
		t.Logf("node_3 listed node_4 %s after it started", took)
	})
}

// missJoin starts four nodes, makes node_3 deaf while node_4 joins and its
// news is gossiped, then says how long after its start node_3 listed node_4,
// and what went wrong.
func missJoin(t *testing.T) (time.Duration, string) {
	const hb = 200 * time.Millisecond
	keys, network := testKey(t), newMemNet()
	defer network.close(hb)
	nodes, join := network.startNodes(t, keys, hb, 4)
	started := time.Now()
	all := func(ms []*Mesh, n int) bool {
		for _, m := range ms {
			if m.Alive("") != n {
				return false
			}
		}
		return true
	}
	tm := nodes[0].Timing()
	waitFor(t, 2*tm.FullSync, "4 nodes list each other alive", func() bool { return all(nodes, 3) })

	deaf := nodes[3]
	network.setDeaf(deaf.Self().Addr, true)
	late := join("node_4")
	waitFor(t, 2*tm.FullSync, "node_0-2 and node_4 list each other", func() bool { return all(append(nodes[:3:3], late), 4) })
	// Each node passes news on a few times, one gossip round after another
	// (HB/5): after a heartbeat nobody gossips node_4's join any more.
	time.Sleep(hb)
	listed := func() bool { p, ok := deaf.Peer("node_4"); return ok && p.State == Alive }
	if listed() {
		t.Fatalf("node_3 listed node_4 while deaf, %s after its start: it missed nothing", time.Since(started))
	}
	network.setDeaf(deaf.Self().Addr, false)
	// docs/mesh.md: convergence within 5 s at the default heartbeat of 1 s.
	goal := 5 * hb
	for !listed() && time.Since(started) <= 2*tm.FullSync+goal {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(started)
	if took > goal {
		return took, fmt.Sprintf("node_3 listed node_4 %s after its start, want within %s (FullSync %s)", took, goal, tm.FullSync)
	}
	return took, ""
}
