package meshroute

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/policy"
)

// VoteMethod is the JSON-RPC method a node asks its peers to confirm a
// quorum write with (on their MCP endpoints, with a mesh credential).
const VoteMethod = "physmcp/quorum_vote"

// VoteRequest is what a node asks its peers to confirm.
type VoteRequest struct {
	// Requester is the node that wants to act, Device its device id.
	Requester string `json:"requester"`
	Device    string `json:"device"`
	Tool      string `json:"tool"`
	Value     any    `json:"value,omitempty"`
	// Check names the quorum check the peer runs under its own policy
	// before it confirms; a peer that does not define it refuses.
	Check string `json:"check,omitempty"`
}

// Vote is a peer's answer.
type Vote struct {
	Confirm bool   `json:"confirm"`
	Reason  string `json:"reason,omitempty"`
}

// Quorum counts and polls the mesh for the engine's quorum rules
// (engine.Quorum). It shares the Router's view of the mesh.
type Quorum struct {
	r    *Router
	node string
	keys [][]byte
	http *http.Client
}

// Quorum returns the quorum rules' view of the mesh this router knows,
// voting as node with credentials signed by keys.
func (r *Router) Quorum(node string, keys [][]byte) *Quorum {
	return &Quorum{r: r, node: node, keys: keys, http: &http.Client{}}
}

// voters are the alive peers that count for a quorum over peers.
func voters(m Members, peers string) []mesh.Peer {
	self := m.Self()
	return slices.DeleteFunc(m.Peers(), func(p mesh.Peer) bool {
		return p.NodeID == self.NodeID || p.State != mesh.Alive || peers != policy.QuorumMesh && p.Zone != self.Zone
	})
}

// Reachable implements engine.Quorum: before the node has joined the mesh
// it counts itself alone.
func (q *Quorum) Reachable(peers string) (int, bool) {
	box := q.r.members.Load()
	if box == nil {
		return 1, false
	}
	return 1 + len(voters(box.Members, peers)), box.Members.Partition().Minority()
}

// Confirm implements engine.Quorum: every voter is asked at once and has
// until the mesh's total deadline to confirm.
func (q *Quorum) Confirm(ctx context.Context, tool string, value any, peers, check string) (int, int, string) {
	box := q.r.members.Load()
	if box == nil {
		return 1, 1, ""
	}
	m := box.Members
	ask := voters(m, peers)
	ctx, cancel := context.WithTimeout(ctx, q.r.cfg.Total)
	defer cancel()
	self := m.Self()
	type result struct {
		p   mesh.Peer
		v   Vote
		err error
	}
	results := make(chan result, len(ask))
	for _, p := range ask {
		go func() {
			v, err := q.ask(ctx, p, VoteRequest{Requester: self.NodeID, Device: self.DeviceID, Tool: tool, Value: value, Check: check})
			results <- result{p, v, err}
		}()
	}
	confirmed := 1
	var refused []string
	for range ask {
		res := <-results
		switch {
		case res.err != nil:
			refused = append(refused, fmt.Sprintf("%s: %v", res.p.DeviceID, res.err))
		case !res.v.Confirm:
			refused = append(refused, fmt.Sprintf("%s: %s", res.p.DeviceID, res.v.Reason))
		default:
			confirmed++
		}
	}
	detail := ""
	if len(refused) > 0 {
		slices.Sort(refused)
		detail = "; not confirmed by " + strings.Join(refused, "; ")
	}
	return confirmed, 1 + len(ask), detail
}

func (q *Quorum) ask(ctx context.Context, p mesh.Peer, req VoteRequest) (Vote, error) {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": VoteMethod, "params": req})
	if err != nil {
		return Vote{}, err
	}
	tok, _, err := auth.MeshCredential(q.keys, q.node, p.DeviceID, time.Now())
	if err != nil {
		return Vote{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Endpoint, bytes.NewReader(body))
	if err != nil {
		return Vote{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json, text/event-stream")
	hr.Header.Set("Authorization", "Bearer "+tok)
	resp, err := q.http.Do(hr)
	if err != nil {
		return Vote{}, err
	}
	defer resp.Body.Close()
	var out struct {
		Result *Vote `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&out); err != nil {
		return Vote{}, fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
	}
	switch {
	case out.Error != nil:
		return Vote{}, fmt.Errorf("%s", out.Error.Message)
	case out.Result == nil:
		return Vote{}, fmt.Errorf("HTTP %d without a vote", resp.StatusCode)
	}
	return *out.Result, nil
}

// Check runs this node's quorum check of that name under its own policy
// (engine.Engine.QuorumCheck): nil when it holds, else why not.
type Check func(ctx context.Context, name string) error

var errVoteNotMember = fmt.Errorf("%s is answered only to a mesh peer (a credential signed with the mesh keyring)", VoteMethod)

// Answer is this node's vote on a peer's request: only a mesh peer may
// ask, and only in its own name (the requester is the node its credential
// names, else the alive check below would vouch for whoever it claims to
// be); it is confirmed unless this node is on the minority side of a
// suspected partition, does not see the requester alive itself (a node
// that cannot see the requester cannot vouch for its view of the mesh), or
// the request names a quorum check that does not hold here (check runs it;
// one this node does not define never holds).
func (r *Router) Answer(ctx context.Context, req VoteRequest, check Check) (Vote, error) {
	if err := r.fromPeer(ctx, VoteMethod, "requester", req.Requester, errVoteNotMember); err != nil {
		return Vote{}, err
	}
	box := r.members.Load()
	if box == nil {
		return Vote{Reason: "this node has not joined the mesh yet"}, nil
	}
	m := box.Members
	if part := m.Partition(); part.Minority() {
		return Vote{Reason: fmt.Sprintf("suspected partition: this node reaches %d of the %d peers it reached before", part.Reachable, part.Before)}, nil
	}
	if !slices.ContainsFunc(m.Peers(), func(p mesh.Peer) bool { return p.NodeID == req.Requester && p.State == mesh.Alive }) {
		return Vote{Reason: fmt.Sprintf("%s is not alive in this node's view of the mesh", req.Requester)}, nil
	}
	switch {
	case req.Check == "":
	case check == nil:
		return Vote{Reason: fmt.Sprintf("unknown quorum_check %q: this node runs no quorum checks", req.Check)}, nil
	default:
		if err := check(ctx, req.Check); err != nil {
			return Vote{Reason: err.Error()}, nil
		}
	}
	return Vote{Confirm: true}, nil
}
