package engine

import (
	"context"
	"fmt"

	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// Quorum is the mesh as quorum rules see it (package meshroute implements
// it on the PhysMCP mesh). Nil means a lone node: a count of 1.
type Quorum interface {
	// Reachable counts this node and the alive peers that count for a
	// quorum over peers (policy.QuorumZone or policy.QuorumMesh), and says
	// whether this node is on the minority side of a suspected partition.
	Reachable(peers string) (n int, minority bool)
	// Confirm asks those peers to confirm tool's write of value before ctx
	// ends, each after running its own quorum check of that name (none when
	// check is empty), and returns how many nodes confirmed, this one
	// included, and how many were asked.
	Confirm(ctx context.Context, tool string, value any, peers, check string) (confirmed, asked int, detail string)
}

// quorumRule is what a do tool requires: need nodes (0: no quorum), on
// failure deny or act locally, counted over peers, each voting peer running
// its quorum check of that name.
type quorumRule struct {
	need       int
	allowLocal bool
	peers      string
	check      string
}

func (e *Engine) quorumOf(pt *point) quorumRule {
	q := quorumRule{peers: policy.QuorumZone}
	if pt.c.RequiresQuorum {
		q.need = max(pt.c.QuorumSize, 1)
	}
	for _, r := range pt.rules {
		if r.Quorum != nil {
			q.need = max(q.need, r.Quorum.MinPeers)
			q.allowLocal = r.Quorum.OnFailure == "allow_local"
			if r.Quorum.Peers != "" {
				q.peers = r.Quorum.Peers
			}
			q.check = r.Quorum.Check
		}
	}
	return q
}

// failed applies the rule's on_failure to a quorum not met.
func (q quorumRule) failed(d *decision, format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	if q.allowLocal {
		d.warnings = append(d.warnings, why+"; acting locally as the policy allows")
		return
	}
	*d = deny(promcp.PartitionNoQuorum, "%s", why)
}

// quorumCheck compares the nodes reachable now with what the tool requires
// (can_do and do_* alike; do_* then runs a vote round, confirmQuorum).
func (e *Engine) quorumCheck(pt *point, d *decision) {
	q := e.quorumOf(pt)
	if q.need == 0 {
		return
	}
	have, minority := 1, false
	if e.quorum != nil {
		have, minority = e.quorum.Reachable(q.peers)
	}
	switch {
	case minority:
		q.failed(d, "suspected partition: this node is on the minority side (current alive peers: %d, required: %d)", have, q.need)
	case have < q.need:
		q.failed(d, "current alive peers: %d, required: %d", have, q.need)
	}
}

// confirmQuorum runs the vote round of a do_* that needs a quorum of more
// than this node: the peers confirm within the mesh deadline or the write
// is refused.
func (e *Engine) confirmQuorum(ctx context.Context, pt *point, value any) decision {
	d := decision{permission: promcp.Allowed}
	q := e.quorumOf(pt)
	if q.need <= 1 || e.quorum == nil {
		return d
	}
	confirmed, asked, detail := e.quorum.Confirm(ctx, pt.tool, value, q.peers, q.check)
	if confirmed < q.need {
		q.failed(&d, "confirmed by %d nodes of %d asked (this one included), required: %d%s", confirmed, asked, q.need, detail)
	}
	return d
}

// quorumConstraint is what can_do tells of a do tool's quorum: nodes
// needed, which peers vote and the check they will run (can_do counts the
// peers but holds no vote: that runs when the write comes).
func (e *Engine) quorumConstraint(pt *point) *promcp.QuorumConstraint {
	q := e.quorumOf(pt)
	if q.need == 0 {
		return nil
	}
	return &promcp.QuorumConstraint{MinPeers: q.need, Peers: q.peers, Check: q.check}
}
