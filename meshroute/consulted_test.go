package meshroute

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// stuckAsker is a fakeAsker whose peers in stuck ignore the call's context
// and answer only once release is closed (after Route has returned).
type stuckAsker struct {
	fakeAsker
	stuck   map[string]bool
	release chan struct{}
}

func (s *stuckAsker) Ask(ctx context.Context, p mesh.Peer, args map[string]any, hop Hop) (promcp.CapabilityReport, error) {
	if s.stuck[p.NodeID] {
		<-s.release
		return candidateOf(p, "do_rain"), nil
	}
	return s.fakeAsker.Ask(ctx, p, args, hop)
}

// Every peer the coordinator consults is in the report: a candidate, or
// blocked when it answered with an error, never answered (its late answer
// is not used), or was lost by the peer that forwarded to it; peers known
// offline are blocked unasked. Each is counted in the mesh metadata.
func TestEveryConsultedPeerIsReported(t *testing.T) {
	ms := members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{
		peer("b", "z2", mesh.Alive, "rain"), // answers
		peer("c", "z2", mesh.Alive, "rain"), // never answers in time
		peer("d", "z2", mesh.Alive, "rain"), // forwarded to e, which it lost
		peer("f", "z2", mesh.Suspect, "rain"),
	}}
	ask := &stuckAsker{stuck: map[string]bool{"c": true}, release: make(chan struct{})}
	defer close(ask.release)
	ask.answer = func(p mesh.Peer, _ Hop) promcp.CapabilityReport {
		if p.NodeID != "d" {
			return candidateOf(p, "do_rain")
		}
		rep := unserved()
		rep.Unroutable = []promcp.Unroutable{}
		rep.Blocked = []promcp.Blocked{offlineEntry(peer("e", "z3", mesh.Alive), "no answer within the query's 300 ms")}
		rep.Metadata.MeshMetadata = &promcp.MeshMetadata{PeersConsulted: 1, ResponsesDroppedLate: 1}
		return rep
	}
	r := New(ask, Config{Total: 200 * time.Millisecond, PerHop: 50 * time.Millisecond})
	r.SetMembers(ms)
	rep, err := r.Route(context.Background(), rainArgs, nil, manifest.RoleNone, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Candidates) != 1 || rep.Candidates[0].DeviceID != "b" {
		t.Errorf("candidates %+v; want b's only (c's answer comes after the deadline)", rep.Candidates)
	}
	want := map[string]string{"c": "no answer within the query's 200 ms", "e": "no answer within", "f": "suspected in the mesh"}
	for _, b := range rep.Blocked {
		if w, ok := want[b.DeviceID]; ok && b.Permission == promcp.SourceUnreachable && strings.HasPrefix(b.Reason, "device_offline: ") && strings.Contains(b.Reason, w) {
			delete(want, b.DeviceID)
		}
	}
	if len(want) > 0 || len(rep.Blocked) != 3 {
		t.Errorf("blocked %+v; missing %v", rep.Blocked, want)
	}
	if mm := rep.Metadata.MeshMetadata; mm.FanoutUsed != 3 || mm.PeersConsulted != 4 || mm.ResponsesReceived != 2 || mm.ResponsesDroppedLate != 2 {
		t.Errorf("metadata %+v; want fanout 3, 4 consulted, 2 received, 2 dropped late (c here, e at d)", mm)
	}
}
