package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// fakeQuorum is a mesh seen by the quorum rules: alive peers that count,
// whether this node is on a partition's minority side, and how many of
// the peers confirm a vote (and the quorum check it asked them to run).
type fakeQuorum struct {
	alive, confirm int
	minority       bool
	votes          atomic.Int32
	check          string
}

func (q *fakeQuorum) Reachable(string) (int, bool) { return 1 + q.alive, q.minority }
func (q *fakeQuorum) Confirm(_ context.Context, _ string, _ any, _, check string) (int, int, string) {
	q.check = check
	q.votes.Add(1)
	return 1 + q.confirm, 1 + q.alive, ""
}

// The mesh example's pump needs a quorum of 2 in its zone: refused alone,
// on a partition's minority side, or when the vote round falls short; run
// when a peer confirms. Nothing reaches the bus when refused.
func TestQuorumCountsAndVotes(t *testing.T) {
	m, diags := manifest.Load("../examples/mesh/irrigation/physmcp.manifest.yml")
	if m == nil {
		t.Fatal(diags)
	}
	p, diags := policy.Load("../examples/mesh/irrigation/physmcp.policy.yml", m)
	if p == nil {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		name      string
		q         *fakeQuorum
		want      promcp.Permission
		why       string
		voteRound bool
	}{
		{"lone node", nil, promcp.PartitionNoQuorum, "current alive peers: 1, required: 2", false},
		{"no peer alive", &fakeQuorum{}, promcp.PartitionNoQuorum, "current alive peers: 1, required: 2", false},
		{"minority side", &fakeQuorum{alive: 1, confirm: 1, minority: true}, promcp.PartitionNoQuorum, "minority side", false},
		{"peer does not confirm", &fakeQuorum{alive: 1}, promcp.PartitionNoQuorum, "confirmed by 1 nodes of 2 asked", true},
		{"peer confirms", &fakeQuorum{alive: 1, confirm: 1}, promcp.Allowed, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
			if err != nil {
				t.Fatal(err)
			}
			opts := engine.Options{Logger: quiet}
			if tc.q != nil {
				opts.Quorum = tc.q
			}
			e, err := engine.New(m, p, buses, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			gpio := buses["gpio"].(interface{ Writes() int64 })
			before := gpio.Writes()
			op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
			rep, _ := e.CanDo(context.Background(), op, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Value: true}})
			resp, err := e.Do(context.Background(), op, "do_irrigation_pump", promcp.DoRequest{Value: true, IdempotencyKey: "k-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			wrote := gpio.Writes() - before
			if tc.want == promcp.Allowed {
				if resp.Status != promcp.StatusSuccess || wrote != 1 {
					t.Fatalf("do: %s %s (%s), %d writes; want success, 1 write", resp.Status, resp.Permission, resp.Reason, wrote)
				}
			} else if resp.Permission != tc.want || !strings.Contains(resp.Reason, tc.why) || wrote != 0 {
				t.Fatalf("do: %s %s %q, %d writes; want %s mentioning %q, no write", resp.Status, resp.Permission, resp.Reason, wrote, tc.want, tc.why)
			}
			if !tc.voteRound && tc.want != promcp.Allowed && (len(rep.Blocked) != 1 || rep.Blocked[0].Permission != tc.want) {
				t.Errorf("can_do blocked %+v; want %s", rep.Blocked, tc.want)
			}
			if tc.q != nil && (tc.q.votes.Load() == 1) != tc.voteRound {
				t.Errorf("vote rounds %d, want one: %v", tc.q.votes.Load(), tc.voteRound)
			}
			// The peers are asked to run the policy's check, and can_do says
			// which (it counts, it does not vote).
			if tc.voteRound && tc.q.check != "watering_ok" {
				t.Errorf("the vote asked the peers to run quorum check %q, want watering_ok", tc.q.check)
			}
			if len(rep.Candidates) == 1 {
				if q := rep.Candidates[0].Constraints.Quorum; q == nil || *q != (promcp.QuorumConstraint{MinPeers: 2, Peers: "zone", Check: "watering_ok"}) {
					t.Errorf("can_do constraints.quorum %+v, want 2 in the zone, check watering_ok", q)
				}
			}
		})
	}
}
