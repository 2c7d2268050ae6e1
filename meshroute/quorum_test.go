package meshroute

import (
	"context"
	"errors"
	"testing"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/mesh"
)

// A peer's vote: a request without a check is confirmed as before; one
// that names a check is confirmed only when this node's own check holds,
// and refused with its reason otherwise (a check this node does not run
// never holds).
func TestAnswerRunsTheNamedQuorumCheck(t *testing.T) {
	r := New(&fakeAsker{}, Config{})
	r.SetMembers(members{self: peer("node_b", "plant", mesh.Alive), peers: []mesh.Peer{peer("node_a", "plant", mesh.Alive)}})
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Name: "mesh:node_a", Method: auth.MethodMesh, Node: "node_a"})
	var asked []string
	door := errors.New("quorum_check pump_area_clear: read_door_closed is false, needs read_door_closed == true")
	check := func(_ context.Context, name string) error {
		asked = append(asked, name)
		if name == "pump_area_clear" {
			return door
		}
		return nil
	}
	for _, tc := range []struct {
		name, check string
		run         Check
		confirm     bool
		reason      string
	}{
		{"no check named", "", check, true, ""},
		{"check holds", "tank_full", check, true, ""},
		{"check fails", "pump_area_clear", check, false, door.Error()},
		{"node runs no checks", "tank_full", nil, false, `unknown quorum_check "tank_full": this node runs no quorum checks`},
	} {
		asked = nil
		v, err := r.Answer(ctx, VoteRequest{Requester: "node_a", Device: "node_a", Tool: "do_pump", Value: true, Check: tc.check}, tc.run)
		if err != nil || v.Confirm != tc.confirm || v.Reason != tc.reason {
			t.Errorf("%s: %+v %v, want confirm %v reason %q", tc.name, v, err, tc.confirm, tc.reason)
		}
		if want := tc.check != "" && tc.run != nil; (len(asked) == 1 && asked[0] == tc.check) != want {
			t.Errorf("%s: ran checks %v", tc.name, asked)
		}
	}
	// The mesh comes first: a requester this node does not see alive is
	// refused without running the check.
	asked = nil
	if v, _ := r.Answer(ctx, VoteRequest{Requester: "node_x", Tool: "do_pump", Check: "tank_full"}, check); v.Confirm || len(asked) != 0 {
		t.Errorf("unknown requester: %+v, checks run %v", v, asked)
	}
	if _, err := r.Answer(context.Background(), VoteRequest{Requester: "node_a", Tool: "do_pump", Check: "tank_full"}, check); err == nil {
		t.Errorf("a vote without a mesh credential was answered")
	}
}
