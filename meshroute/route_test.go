package meshroute

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

type members struct {
	self  mesh.Peer
	peers []mesh.Peer
}

func (m members) Self() mesh.Peer           { return m.self }
func (m members) Peers() []mesh.Peer        { return m.peers }
func (m members) SizeEstimate() int         { return 1 + len(m.peers) }
func (m members) PartitionState() string    { return mesh.PartitionNone }
func (m members) Partition() mesh.Partition { return mesh.Partition{State: mesh.PartitionNone} }
func peer(id, zone string, st mesh.State, tags ...string) mesh.Peer {
	return mesh.Peer{NodeID: id, DeviceID: id, Zone: zone, State: st, Endpoint: "http://" + id + "/mcp",
		Tags: mesh.Digest(append(tags, mesh.LocationPrefix+zone))}
}

// fakeAsker answers each peer from answer, or hangs until the call's
// context ends for the peers in hang; it records every hop it was given,
// when it was asked, and the deadline of each call's context (zero: none).
type fakeAsker struct {
	answer    func(p mesh.Peer, hop Hop) promcp.CapabilityReport
	hang      map[string]bool
	mu        sync.Mutex
	hops      map[string]Hop
	asked     map[string]time.Time
	deadlines map[string]time.Time
	calls     atomic.Int32
}

func (f *fakeAsker) Ask(ctx context.Context, p mesh.Peer, _ map[string]any, hop Hop) (promcp.CapabilityReport, error) {
	f.calls.Add(1)
	f.mu.Lock()
	if f.hops == nil {
		f.hops, f.asked, f.deadlines = map[string]Hop{}, map[string]time.Time{}, map[string]time.Time{}
	}
	f.hops[p.NodeID] = hop
	f.asked[p.NodeID] = time.Now()
	f.deadlines[p.NodeID], _ = ctx.Deadline()
	f.mu.Unlock()
	if f.hang[p.NodeID] {
		<-ctx.Done()
		return promcp.CapabilityReport{}, context.DeadlineExceeded
	}
	return f.answer(p, hop), nil
}

// call is when p was asked and the deadline it was given, once it has been
// asked: a goroutine the router started may be asked after the query ended.
func (f *fakeAsker) call(t *testing.T, p string) (asked, deadline time.Time) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		asked, ok := f.asked[p]
		deadline := f.deadlines[p]
		f.mu.Unlock()
		if ok {
			return asked, deadline
		}
		if time.Now().After(end) {
			t.Fatalf("%s was never asked", p)
		}
	}
}

func candidateOf(p mesh.Peer, tool string) promcp.CapabilityReport {
	return promcp.CapabilityReport{
		Candidates: []promcp.Candidate{{Capability: tool, Source: p.DeviceID, Confidence: 0.9, Permission: promcp.Allowed}},
		Blocked:    []promcp.Blocked{}, Context: promcp.ReportContext{RelatedReads: []string{"read_" + tool[3:]}},
		Metadata: promcp.ReportMetadata{DeviceID: p.DeviceID},
	}
}

func unserved() promcp.CapabilityReport {
	return promcp.CapabilityReport{
		QueryID: "q-1", Candidates: []promcp.Candidate{}, Blocked: []promcp.Blocked{},
		Unroutable: []promcp.Unroutable{{Outcome: promcp.OutcomeUnroutable, Reason: promcp.NoProducer, Detail: "nothing here"}},
	}
}

// own is a node's own report, as Route's local.
func own(rep promcp.CapabilityReport) func(context.Context) (promcp.CapabilityReport, error) {
	return func(context.Context) (promcp.CapabilityReport, error) { return rep, nil }
}

var rainArgs = map[string]any{"intent": map[string]any{"semantic_tags": []any{"rain"}, "action": "read"}}

func TestCoordinatorAsksMatchingPeersAndMerges(t *testing.T) {
	ms := members{self: peer("a", "z1", mesh.Alive, "fan"), peers: []mesh.Peer{
		peer("b", "z1", mesh.Alive, "fan"),
		peer("d", "z2", mesh.Alive, "rain"),
		peer("e", "z2", mesh.Dead, "rain"),
	}}
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return candidateOf(p, "do_rain_cover") }}
	r := New(ask, Config{})
	r.SetMembers(ms)
	rep, err := r.Route(context.Background(), rainArgs, nil, manifest.RoleNone, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	if ask.calls.Load() != 1 || ask.hops["d"].TTL != DefaultTTL-1 || ask.hops["d"].ParentQueryID != "q-1" || ask.hops["d"].RootQueryID != "q-1" || ask.hops["d"].QueryID == "q-1" {
		t.Fatalf("asked %d peers, hops %+v; want only d, ttl %d, a new query id, parent and root q-1", ask.calls.Load(), ask.hops, DefaultTTL-1)
	}
	if len(rep.Candidates) != 1 || rep.Candidates[0].DeviceID != "d" || rep.Candidates[0].Endpoint != "http://d/mcp" || !rep.Feasible {
		t.Fatalf("candidates %+v feasible %v; want d's, with its endpoint", rep.Candidates, rep.Feasible)
	}
	if len(rep.Blocked) != 1 || rep.Blocked[0].DeviceID != "e" || rep.Blocked[0].Permission != promcp.SourceUnreachable {
		t.Fatalf("blocked %+v; want the dead e as source_unreachable", rep.Blocked)
	}
	if len(rep.Unroutable) != 0 {
		t.Errorf("unroutable %+v stays although the mesh answered", rep.Unroutable)
	}
	mm := rep.Metadata.MeshMetadata
	if mm == nil || mm.CoordinatorNode != "a" || mm.FanoutUsed != 1 || mm.PeersConsulted != 1 || mm.ResponsesReceived != 1 || mm.TTLUsed != 1 || mm.MeshSizeEstimate != 4 {
		t.Fatalf("metadata %+v", mm)
	}
	if rep.Context.RelatedReads[0] != "d.read_rain_cover" {
		t.Errorf("related reads %v; want d.read_rain_cover", rep.Context.RelatedReads)
	}
}

func TestLocalAnswerIsNotRouted(t *testing.T) {
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return candidateOf(p, "do_x") }}
	r := New(ask, Config{})
	r.SetMembers(members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{peer("d", "z1", mesh.Alive, "rain")}})
	local := candidateOf(peer("a", "z1", mesh.Alive), "do_rain")
	rep, _ := r.Route(context.Background(), rainArgs, nil, manifest.RoleNone, own(local))
	if ask.calls.Load() != 0 || rep.Metadata.MeshMetadata != nil {
		t.Fatalf("a query served here asked %d peers", ask.calls.Load())
	}
}

// A peer that hangs never stretches the query past its budget: every peer
// is asked under a deadline no later than the query's start plus its total
// budget, nor later than when it was asked plus the per-hop time a peer
// needs to forward again (TTL hops); the hung peer is reported unreachable and counted
// as dropped late. The caller's context allows a minute, so a router that
// passed it on would be seen. How long the query takes on the clock depends
// on the host's load and is not what this checks.
func TestHungPeerKeepsTheDeadline(t *testing.T) {
	for _, c := range []struct {
		name          string
		total, perHop time.Duration
	}{
		{"total budget first", 200 * time.Millisecond, time.Second},
		{"per-hop time first", time.Second, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{peer("c", "z2", mesh.Alive, "rain"), peer("d", "z2", mesh.Alive, "rain")}}
			ask := &fakeAsker{hang: map[string]bool{"c": true}, answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return candidateOf(p, "do_rain") }}
			var start time.Time // the query's, the router's first reading of the clock
			var once sync.Once
			now := func() time.Time { n := time.Now(); once.Do(func() { start = n }); return n }
			r := New(ask, Config{Total: c.total, PerHop: c.perHop, Now: now})
			r.SetMembers(ms)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, _ := r.Route(ctx, rainArgs, nil, manifest.RoleNone, own(unserved()))
			mm := rep.Metadata.MeshMetadata
			if mm.ResponsesReceived != 1 || mm.ResponsesDroppedLate != 1 {
				t.Fatalf("metadata %+v; want 1 received, 1 dropped late", mm)
			}
			if len(rep.Blocked) != 1 || rep.Blocked[0].DeviceID != "c" || len(rep.Candidates) != 1 {
				t.Fatalf("blocked %+v candidates %+v", rep.Blocked, rep.Candidates)
			}
			for _, p := range []string{"c", "d"} {
				asked, d := ask.call(t, p)
				bound := start.Add(c.total)
				if hop := asked.Add(c.perHop * DefaultTTL); hop.Before(bound) {
					bound = hop
				}
				if d.IsZero() || d.After(bound) {
					t.Errorf("%s asked with deadline %v after the query's start; want at most %v", p, d.Sub(start), bound.Sub(start))
				}
			}
			if got := ask.hops["c"].BudgetMs; got <= 0 || got > c.total.Milliseconds() {
				t.Errorf("budget given to the peer %d ms; want within the query's %d", got, c.total.Milliseconds())
			}
		})
	}
}

func meshCtx() context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{Name: "mesh:a", Method: auth.MethodMesh, Node: "a"})
}

func TestForwardedQueries(t *testing.T) {
	ms := members{self: peer("b", "z1", mesh.Alive), peers: []mesh.Peer{peer("a", "z1", mesh.Alive, "rain"), peer("d", "z2", mesh.Alive, "rain")}}
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return candidateOf(p, "do_rain") }}
	r := New(ask, Config{})
	r.SetMembers(ms)
	hop := map[string]any{MetaKey: map[string]any{"query_id": "f-1", "root_query_id": "r-1", "coordinator": "a", "from": "a", "ttl": 1, "visited": []any{"a", "b"}, "budget_ms": 300}}

	if _, err := r.Route(context.Background(), rainArgs, hop, manifest.RoleNone, own(unserved())); err != ErrNotMember {
		t.Fatalf("a forwarded query from a caller without a mesh credential: err %v, want ErrNotMember", err)
	}
	rep, err := r.Route(meshCtx(), rainArgs, hop, manifest.RoleNone, own(unserved()))
	if err != nil || ask.calls.Load() != 1 || len(rep.Candidates) != 1 || rep.Candidates[0].DeviceID != "d" {
		t.Fatalf("forwarded with ttl 1: err %v, %d asks, candidates %+v; want d asked once (a is visited)", err, ask.calls.Load(), rep.Candidates)
	}
	if h := ask.hops["d"]; h.TTL != 0 || h.Coordinator != "a" || h.From != "b" {
		t.Errorf("hop to d %+v; want ttl 0, coordinator a, from b", h)
	}
	// The same query on another path: another hop id, the same root.
	other := map[string]any{MetaKey: map[string]any{"query_id": "f-3", "parent_query_id": "f-0", "root_query_id": "r-1", "coordinator": "a", "from": "a", "ttl": 1, "visited": []any{"a", "c"}, "budget_ms": 300}}
	again, _ := r.Route(meshCtx(), rainArgs, other, manifest.RoleNone, func(context.Context) (promcp.CapabilityReport, error) {
		t.Error("the dry runs ran again for a query answered on another path")
		return unserved(), nil
	})
	if ask.calls.Load() != 1 || len(again.Candidates)+len(again.Blocked)+len(again.Unroutable) != 0 || !again.Metadata.DuplicateQuery {
		t.Fatalf("the same root query on another path: %d asks, %+v; want an empty answer marked duplicate_query", ask.calls.Load(), again)
	}
	last := map[string]any{MetaKey: map[string]any{"query_id": "f-2", "root_query_id": "r-2", "coordinator": "a", "from": "a", "ttl": 0, "visited": []any{"a"}, "budget_ms": 100}}
	if _, err := r.Route(meshCtx(), rainArgs, last, manifest.RoleNone, own(unserved())); err != nil || ask.calls.Load() != 1 {
		t.Fatalf("ttl 0 forwarded on: err %v, %d asks", err, ask.calls.Load())
	}
}

// The merged answer's related reads (node.tool) are capped at max_candidates
// as its candidates are, each read's observation going with it, and counted
// in metadata.omitted.
func TestMergedRelatedReadsCapped(t *testing.T) {
	ms := members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{peer("c", "z2", mesh.Alive, "rain"), peer("d", "z2", mesh.Alive, "rain")}}
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport {
		rep := candidateOf(p, "do_rain_cover")
		rep.Context.CurrentObservations = map[string]any{"read_rain_cover": map[string]any{"value": true}}
		return rep
	}}
	r := New(ask, Config{})
	r.SetMembers(ms)
	args := map[string]any{"intent": rainArgs["intent"], "max_candidates": 1.0}
	rep, err := r.Route(context.Background(), args, nil, manifest.RoleNone, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	reads := rep.Context.RelatedReads
	if len(rep.Candidates) != 1 || len(reads) != 1 || len(rep.Context.CurrentObservations) != 1 || rep.Context.CurrentObservations[reads[0]] == nil {
		t.Fatalf("candidates %+v, related reads %v, observations %v; want one of each", rep.Candidates, reads, rep.Context.CurrentObservations)
	}
	if om := rep.Metadata.Omitted; om == nil || om.Candidates.Count != 1 || om.RelatedReads.Count != 1 || om.MaxCandidates != 1 {
		t.Fatalf("omitted %+v", om)
	}
}

// A merged report whose only candidates await a person's approval is
// feasible:false and says why under blocked, although merging keeps one
// entry per device and capability (the peer's own blocked entry for the
// candidate is dropped as seen); once another device's candidate is allowed
// the entry goes again.
func TestMergedApprovalOnlyIsExplained(t *testing.T) {
	approvalOnly := func(p mesh.Peer) promcp.CapabilityReport {
		rep := candidateOf(p, "do_rain_cover")
		rep.Candidates[0].Permission = promcp.RequiresHumanApproval
		promcp.DeriveFeasible(&rep)
		return rep
	}
	for _, tc := range []struct {
		name     string
		answer   func(p mesh.Peer) promcp.CapabilityReport
		feasible bool
		blocked  int
	}{
		{name: "only approval", answer: approvalOnly, blocked: 2},
		{name: "one allowed", feasible: true, answer: func(p mesh.Peer) promcp.CapabilityReport {
			if p.NodeID == "d" {
				return candidateOf(p, "do_rain_cover")
			}
			return approvalOnly(p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport { return tc.answer(p) }}
			r := New(ask, Config{})
			r.SetMembers(members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{peer("c", "z2", mesh.Alive, "rain"), peer("d", "z2", mesh.Alive, "rain")}})
			rep, err := r.Route(context.Background(), rainArgs, nil, manifest.RoleNone, own(unserved()))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Candidates) != 2 || rep.Feasible != tc.feasible || len(rep.Blocked) != tc.blocked {
				t.Fatalf("candidates %+v, blocked %+v, feasible %v; want 2 candidates, %d blocked, feasible %v", rep.Candidates, rep.Blocked, rep.Feasible, tc.blocked, tc.feasible)
			}
			for _, b := range rep.Blocked {
				if b.Permission != promcp.RequiresHumanApproval || b.Reason == "" || b.Endpoint == "" {
					t.Errorf("blocked entry %+v; want requires_human_approval with a reason and where to call it", b)
				}
			}
		})
	}
}

// A peer answers for the mesh role its policy gives the coordinator, never
// the caller's: the coordinator holds each acting candidate to what its
// constraints say the call asks (min_role, roles) and the caller's role
// here. An operator's query: b's supervisor-only cover is blocked
// permission_insufficient, d's operator cover stays a candidate; a
// viewer's: both blocked, the query not feasible. Reads (no min_role) are
// left as answered.
func TestCoordinatorHoldsPeersCandidatesToTheCallersRole(t *testing.T) {
	ms := members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{
		peer("b", "z1", mesh.Alive, "rain"), peer("d", "z2", mesh.Alive, "rain"), peer("e", "z2", mesh.Alive, "rain"),
	}}
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport {
		rep := candidateOf(p, "do_rain_cover")
		switch p.NodeID {
		case "b":
			rep.Candidates[0].Constraints.MinRole = "supervisor"
		case "d":
			rep.Candidates[0].Constraints.MinRole = "operator"
		case "e":
			rep.Candidates[0].Capability = "read_rain_rate"
		}
		return rep
	}}
	r := New(ask, Config{})
	r.SetMembers(ms)
	devices := func(cands []promcp.Candidate) (ids []string) {
		for _, c := range cands {
			ids = append(ids, c.DeviceID)
		}
		slices.Sort(ids)
		return ids
	}
	rep, err := r.Route(context.Background(), rainArgs, nil, manifest.RoleOperator, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rep.Blocked, func(b promcp.Blocked) bool { return b.DeviceID == "b" })
	if got := devices(rep.Candidates); !slices.Equal(got, []string{"d", "e"}) || !rep.Feasible || i < 0 ||
		rep.Blocked[i].Permission != promcp.PermissionInsufficient || rep.Blocked[i].Capability != "do_rain_cover" || rep.Blocked[i].Endpoint != "http://b/mcp" ||
		rep.Blocked[i].Reason != "the device asks role supervisor or higher for the call; the caller has role operator here" {
		t.Errorf("an operator: candidates %v, blocked %+v, feasible %v; want d and e, b blocked permission_insufficient", got, rep.Blocked, rep.Feasible)
	}
	rep, err = r.Route(context.Background(), rainArgs, nil, manifest.RoleViewer, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	if got := devices(rep.Candidates); !slices.Equal(got, []string{"e"}) || rep.Feasible != true || len(rep.Blocked) != 2 {
		t.Errorf("a viewer: candidates %v, blocked %+v; want e's read alone, b and d blocked", got, rep.Blocked)
	}
}

// A role the coordinator does not know in a peer's constraints (another
// version's role, another spelling), or a roles list without min_role,
// holds the candidate back: read as no requirement, they offered a
// supervisor-only write to an operator.
func TestCoordinatorHoldsBackARoleItDoesNotKnow(t *testing.T) {
	ms := members{self: peer("a", "z1", mesh.Alive), peers: []mesh.Peer{peer("b", "z1", mesh.Alive, "rain"), peer("d", "z1", mesh.Alive, "rain"), peer("e", "z1", mesh.Alive, "rain")}}
	ask := &fakeAsker{answer: func(p mesh.Peer, _ Hop) promcp.CapabilityReport {
		rep := candidateOf(p, "do_rain_cover")
		rep.Candidates[0].Constraints.MinRole = map[string]string{"b": "Supervisor", "d": "engineer"}[p.NodeID]
		if p.NodeID == "e" {
			rep.Candidates[0].Constraints.Roles = []string{"supervisor"}
		}
		return rep
	}}
	r := New(ask, Config{})
	r.SetMembers(ms)
	for _, role := range []manifest.Role{manifest.RoleOperator, manifest.RoleAdmin} {
		rep, err := r.Route(context.Background(), rainArgs, nil, role, own(unserved()))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Candidates) != 0 || rep.Feasible || len(rep.Blocked) != 3 || rep.Blocked[0].Permission != promcp.PermissionInsufficient {
			t.Errorf("%s: candidates %+v, blocked %+v, feasible %v; want all three held back", role, rep.Candidates, rep.Blocked, rep.Feasible)
		}
	}
}
