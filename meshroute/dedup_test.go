package meshroute

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// meshNet is a mesh of Routers in one process: asking a peer runs the
// peer's Route with the asking node's mesh principal, the hop and the
// answer passing through JSON as over HTTP.
type meshNet struct {
	routers map[string]*Router
	local   map[string]func(ctx context.Context) promcp.CapabilityReport
	arrived map[string]*atomic.Int32 // queries that reached the node
	dryRuns map[string]*atomic.Int32 // times the node made its own report
	// lost holds "from>to" asks that never arrive (the call hangs until its deadline);
	// before holds "from>to" asks that wait until the channel is closed.
	lost   map[string]bool
	before map[string]chan struct{}
}

func (n *meshNet) Ask(ctx context.Context, p mesh.Peer, args map[string]any, hop Hop) (promcp.CapabilityReport, error) {
	link := hop.From + ">" + p.NodeID
	if n.lost[link] {
		<-ctx.Done()
		return promcp.CapabilityReport{}, context.DeadlineExceeded
	}
	if ch := n.before[link]; ch != nil {
		<-ch
	}
	var meta map[string]any
	roundTrip(hop, &meta)
	n.arrived[p.NodeID].Add(1)
	ctx = auth.WithPrincipal(ctx, auth.Principal{Name: "mesh:" + hop.From, Method: auth.MethodMesh, Node: hop.From})
	rep, err := n.routers[p.NodeID].Route(ctx, args, map[string]any{MetaKey: meta}, manifest.RoleNone, func(ctx context.Context) (promcp.CapabilityReport, error) {
		n.dryRuns[p.NodeID].Add(1)
		return n.local[p.NodeID](ctx), nil
	})
	if err != nil {
		return promcp.CapabilityReport{}, err
	}
	if ctx.Err() != nil { // the asker stopped waiting
		return promcp.CapabilityReport{}, context.DeadlineExceeded
	}
	var out promcp.CapabilityReport
	roundTrip(rep, &out)
	return out, nil
}

func roundTrip(in, out any) {
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
}

// diamond: a knows b and c (not d); b and c both know d, which alone has
// a rain capability. a coordinates a query; b and c both forward it to d.
// dView is how a sees d (absent unless given).
func diamond(cfg Config, dView ...mesh.Peer) *meshNet {
	a, b, c, d := peer("a", "z1", mesh.Alive), peer("b", "z1", mesh.Alive, "rain"), peer("c", "z2", mesh.Alive, "rain"), peer("d", "z3", mesh.Alive, "rain")
	views := map[string]members{
		"a": {self: a, peers: append([]mesh.Peer{b, c}, dView...)},
		"b": {self: b, peers: []mesh.Peer{a, d}},
		"c": {self: c, peers: []mesh.Peer{a, d}},
		"d": {self: d, peers: []mesh.Peer{b, c}},
	}
	n := &meshNet{routers: map[string]*Router{}, local: map[string]func(context.Context) promcp.CapabilityReport{},
		arrived: map[string]*atomic.Int32{}, dryRuns: map[string]*atomic.Int32{}, lost: map[string]bool{}, before: map[string]chan struct{}{}}
	for id, v := range views {
		n.routers[id] = New(n, cfg)
		n.routers[id].SetMembers(v)
		n.arrived[id], n.dryRuns[id] = &atomic.Int32{}, &atomic.Int32{}
		n.local[id] = func(context.Context) promcp.CapabilityReport { return unserved() }
	}
	n.local["d"] = func(context.Context) promcp.CapabilityReport { return candidateOf(d, "do_rain_cover") }
	return n
}

// patient waits seconds on every hop: only a wait a test shortens with
// hurry ends while nodes are still working, however loaded the machine.
var patient = Config{Total: 10 * time.Second, PerHop: 3 * time.Second}

// hurry has node id wait briefly for the peers it forwards to (twice
// PerHop with TTL 1 left, 100 ms), so that a peer holding its answer until
// that wait ends is late at id and nowhere else.
func (n *meshNet) hurry(id string) {
	n.routers[id].cfg.PerHop = 50 * time.Millisecond
}

func (n *meshNet) coordinate(t *testing.T) promcp.CapabilityReport {
	t.Helper()
	rep, err := n.routers["a"].Route(context.Background(), rainArgs, nil, manifest.RoleNone, own(unserved()))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func entries(rep promcp.CapabilityReport, device string) (candidates, blocked int) {
	for _, c := range rep.Candidates {
		if c.DeviceID == device {
			candidates++
		}
	}
	for _, b := range rep.Blocked {
		if b.DeviceID == device {
			blocked++
		}
	}
	return candidates, blocked
}

func wantMeta(t *testing.T, rep promcp.CapabilityReport, consulted, received, late int) {
	t.Helper()
	mm := rep.Metadata.MeshMetadata
	if mm == nil || mm.PeersConsulted != consulted || mm.ResponsesReceived != received || mm.ResponsesDroppedLate != late || mm.DuplicateQuery {
		t.Errorf("metadata %+v; want %d consulted, %d received, %d dropped late", mm, consulted, received, late)
	}
}

// A node reached on two paths answers once: its dry runs run once, the
// other path gets an empty answer that counts neither as a response nor as
// another peer consulted, and the report has the device once.
func TestDiamondAnswersOnce(t *testing.T) {
	n := diamond(patient)
	rep := n.coordinate(t)
	if got := n.arrived["d"].Load(); got != 2 {
		t.Fatalf("the query reached d %d times; the diamond needs both paths", got)
	}
	if got := n.dryRuns["d"].Load(); got != 1 {
		t.Errorf("d ran its dry runs %d times; want once", got)
	}
	if c, b := entries(rep, "d"); c != 1 || b != 0 || len(rep.Candidates) != 1 || len(rep.Blocked) != 0 {
		t.Errorf("candidates %+v blocked %+v; want d's candidate once", rep.Candidates, rep.Blocked)
	}
	wantMeta(t, rep, 3, 3, 0) // b, c, d; d's duplicate not counted
	if mm := rep.Metadata.MeshMetadata; mm.TTLUsed != 2 || mm.FanoutUsed != 2 {
		t.Errorf("metadata %+v; want ttl_used 2, fanout_used 2", mm)
	}
}

// The path through b loses the query to d (it never arrives): b reports d
// unreachable, c brings d's answer; d's answer wins and d is listed once.
func TestDiamondLostPathLosesToAnswer(t *testing.T) {
	n := diamond(patient)
	n.hurry("b")
	n.lost["b>d"] = true
	rep := n.coordinate(t)
	if got := n.dryRuns["d"].Load(); got != 1 {
		t.Errorf("d ran its dry runs %d times; want once", got)
	}
	if c, b := entries(rep, "d"); c != 1 || b != 0 {
		t.Errorf("candidates %+v blocked %+v; want d as a candidate only", rep.Candidates, rep.Blocked)
	}
	wantMeta(t, rep, 4, 3, 1) // d was asked on both paths; the ask from b was lost
}

// d answers the path through b too late and c's ask after it: b reports
// d unreachable, c gets d's empty duplicate answer, which is not counted;
// d is blocked once.
func TestDiamondLateAnswerAndDuplicate(t *testing.T) {
	n := diamond(patient)
	n.hurry("b")
	started := make(chan struct{})
	n.before["c>d"] = started
	var once sync.Once
	n.local["d"] = func(ctx context.Context) promcp.CapabilityReport {
		once.Do(func() { close(started) })
		<-ctx.Done() // b's wait for d ends first
		return candidateOf(peer("d", "z3", mesh.Alive), "do_rain_cover")
	}
	rep := n.coordinate(t)
	if got := n.dryRuns["d"].Load(); got != 1 || n.arrived["d"].Load() != 2 {
		t.Errorf("d reached %d times, ran its dry runs %d times; want 2 and 1", n.arrived["d"].Load(), got)
	}
	if c, b := entries(rep, "d"); c != 0 || b != 1 || rep.Blocked[0].Permission != promcp.SourceUnreachable {
		t.Errorf("candidates %+v blocked %+v; want d unreachable once", rep.Candidates, rep.Blocked)
	}
	wantMeta(t, rep, 3, 2, 1)
}

// The coordinator sees d suspected while b reaches it: d's answer wins
// over the coordinator's own view.
func TestAnswerWinsOverOfflineView(t *testing.T) {
	d := peer("d", "z3", mesh.Suspect, "rain")
	n := diamond(patient, d)
	rep := n.coordinate(t)
	if c, b := entries(rep, "d"); c != 1 || b != 0 || len(rep.Blocked) != 0 {
		t.Errorf("candidates %+v blocked %+v; want d as a candidate only", rep.Candidates, rep.Blocked)
	}
}
