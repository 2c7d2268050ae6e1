package meshroute

import (
	"context"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// A vote or a forwarded can_do is answered only in the name of the node
// the caller's mesh credential was minted for: node_2 cannot ask as
// node_3, whom this node sees alive, and a credential naming no node is
// refused. Each refusal is audited; nothing is asked on.
func TestPeerRequestsInAnotherNodesNameAreRefused(t *testing.T) {
	var audited []Refusal
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return candidateOf(p, "do_rain") }}
	r := New(ask, Config{Audit: func(ev Refusal) { audited = append(audited, ev) }})
	r.SetMembers(members{self: peer("node_1", "plant", mesh.Alive), peers: []mesh.Peer{
		peer("node_2", "plant", mesh.Alive), peer("node_3", "plant", mesh.Alive), peer("node_4", "plant", mesh.Alive, "rain")}})
	as := func(node string) context.Context {
		return auth.WithPrincipal(context.Background(), auth.Principal{Name: "mesh:" + node, Method: auth.MethodMesh, Node: node})
	}
	hop := func(id, from string) map[string]any {
		return map[string]any{MetaKey: map[string]any{"query_id": id, "root_query_id": id, "coordinator": "node_2", "from": from, "ttl": 1, "visited": []any{"node_2", "node_1"}, "budget_ms": 300}}
	}

	if v, err := r.Answer(as("node_2"), VoteRequest{Requester: "node_2", Tool: "do_pump"}, nil); err != nil || !v.Confirm {
		t.Errorf("node_2 asking as node_2: %+v %v, want confirmed", v, err)
	}
	if _, err := r.Route(as("node_2"), rainArgs, hop("q-ok", "node_2"), manifest.RoleNone, own(unserved())); err != nil || ask.calls.Load() != 1 {
		t.Errorf("node_2 forwarding as node_2: err %v, %d asks, want node_4 asked", err, ask.calls.Load())
	}
	if len(audited) != 0 {
		t.Fatalf("requests in the caller's own name audited: %+v", audited)
	}

	for _, tc := range []struct {
		name, caller, named, want string
	}{
		{"as another node", "node_2", "node_3", `requester "node_3" is not the node its mesh credential was minted for ("node_2")`},
		{"naming nobody", "node_2", "", `requester "" is not the node its mesh credential was minted for ("node_2")`},
		{"credential naming no node", "", "node_3", "its mesh credential names no calling node (sub)"},
	} {
		audited = nil
		v, err := r.Answer(as(tc.caller), VoteRequest{Requester: tc.named, Tool: "do_pump"}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || v.Confirm {
			t.Errorf("vote %s: %+v %v, want refused with %q", tc.name, v, err, tc.want)
		}
		if len(audited) != 1 || audited[0].Request != VoteMethod || audited[0].Credential != tc.caller || audited[0].Named != tc.named {
			t.Errorf("vote %s: audited %+v", tc.name, audited)
		}

		audited = nil
		_, err = r.Route(as(tc.caller), rainArgs, hop("q-"+tc.name, tc.named), manifest.RoleNone, own(unserved()))
		if err == nil || !strings.Contains(err.Error(), strings.Replace(tc.want, "requester", `_meta "physmcp/mesh" from`, 1)) {
			t.Errorf("forwarded can_do %s: err %v", tc.name, err)
		}
		if len(audited) != 1 || audited[0].Request != "can_do" {
			t.Errorf("forwarded can_do %s: audited %+v", tc.name, audited)
		}
	}
	if ask.calls.Load() != 1 {
		t.Errorf("refused forwarded queries asked peers: %d asks", ask.calls.Load())
	}
}
