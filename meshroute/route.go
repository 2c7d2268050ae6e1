// Package meshroute answers can_do across the PhysMCP mesh: the node that
// receives a query it cannot serve itself coordinates it (PhysMCP's
// floating coordinator: no leader, no state kept), asks the peers whose
// metadata may match, merges their reports by device and says who was asked
// and who did not answer in time. Peers answer with their own
// CapabilityReport: their own policy decides.
//
// It knows the mesh through Members (package mesh) and calls peers through
// an Asker (their MCP endpoints); it knows nothing of buses or of the MCP
// SDK's server side.
package meshroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// MetaKey is the key of the hop in a forwarded can_do's _meta.
const MetaKey = "physmcp/mesh"

// PhysMCP v0.1's routing defaults.
const (
	DefaultTTL    = 3
	DefaultFanout = 3
	DefaultPerHop = 150 * time.Millisecond
	DefaultTotal  = 500 * time.Millisecond
	DefaultDedup  = 5 * time.Second
)

// Hop travels with a forwarded query (in _meta, under MetaKey).
type Hop struct {
	// QueryID names this hop (new for each peer asked); ParentQueryID the
	// hop it was forwarded from (the coordinator's report's query_id for the
	// first hop): PhysMCP's chain.
	QueryID       string `json:"query_id"`
	ParentQueryID string `json:"parent_query_id,omitempty"`
	// RootQueryID is the query_id of the report the coordinator answers, the
	// same on every hop: a node answers a root once (dedup), whatever path
	// it arrives by.
	RootQueryID string `json:"root_query_id"`
	// Coordinator is the node that received the query from its caller.
	Coordinator string `json:"coordinator"`
	// From is the node that sent this hop; it must be the node the
	// sender's mesh credential names.
	From string `json:"from"`
	// TTL is how many more hops the receiver may forward the query.
	TTL int `json:"ttl"`
	// Visited are the nodes already asked (the receiver skips them).
	Visited []string `json:"visited"`
	// BudgetMs is how long the receiver has to answer, forwarding included.
	BudgetMs int64 `json:"budget_ms"`
}

// Members is the mesh as this node sees it.
type Members interface {
	Self() mesh.Peer
	Peers() []mesh.Peer
	SizeEstimate() int
	PartitionState() string
	Partition() mesh.Partition
}

// Asker calls can_do on a peer with args and the hop in _meta.
type Asker interface {
	Ask(ctx context.Context, p mesh.Peer, args map[string]any, hop Hop) (promcp.CapabilityReport, error)
}

// Config tunes routing; zero values take PhysMCP's defaults.
type Config struct {
	TTL, Fanout   int
	PerHop, Total time.Duration
	Dedup         time.Duration
	Now           func() time.Time
	// Logger (default slog.Default()) and Audit (nil: none) receive the
	// peer requests refused for naming another node than their credential.
	Logger *slog.Logger
	Audit  func(Refusal)
}

// Router coordinates and forwards can_do queries.
type Router struct {
	cfg     Config
	ask     Asker
	members atomic.Pointer[membersBox]

	mu   sync.Mutex
	seen map[string]time.Time // root query ids answered, until they may be forgotten
}

type membersBox struct{ Members }

// New returns a Router that asks peers through ask. It routes nothing until
// SetMembers gives it the mesh.
func New(ask Asker, cfg Config) *Router {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Fanout <= 0 {
		cfg.Fanout = DefaultFanout
	}
	if cfg.PerHop <= 0 {
		cfg.PerHop = DefaultPerHop
	}
	if cfg.Total <= 0 {
		cfg.Total = DefaultTotal
	}
	if cfg.Dedup <= 0 {
		cfg.Dedup = DefaultDedup
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Router{cfg: cfg, ask: ask, seen: map[string]time.Time{}}
}

// SetMembers gives the router the mesh once this node has joined it.
func (r *Router) SetMembers(m Members) { r.members.Store(&membersBox{m}) }

// ErrNotMember refuses a forwarded query whose caller did not authenticate
// with a mesh credential (a node outside the keyring, or a client posing as
// a peer).
var ErrNotMember = fmt.Errorf("a forwarded can_do (_meta %q) is accepted only from a mesh peer (a credential signed with the mesh keyring)", MetaKey)

// Route answers a can_do whose arguments are args and _meta meta, from a
// caller with role here; local computes this node's own report (its dry
// runs) and is called at most once: not at all for a forwarded query this
// node answered already on another path, which is answered empty at once.
// A caller's query that no capability here serves is coordinated across
// the mesh, the peers' candidates held to the caller's role (callerMayNot);
// a query forwarded by a peer (meta carries a Hop) is forwarded on while
// its TTL lasts. Everything else is local's report, unchanged. local's
// error is returned as it is; any other error refuses a forwarded query.
func (r *Router) Route(ctx context.Context, args map[string]any, meta map[string]any, role manifest.Role, local func(context.Context) (promcp.CapabilityReport, error)) (promcp.CapabilityReport, error) {
	hop, forwarded, err := hopFrom(meta)
	if err != nil {
		return promcp.CapabilityReport{}, err
	}
	if forwarded {
		if err := r.fromPeer(ctx, "can_do", fmt.Sprintf("_meta %q from", MetaKey), hop.From, ErrNotMember); err != nil {
			return promcp.CapabilityReport{}, err
		}
	}
	box := r.members.Load()
	if box == nil {
		return local(ctx)
	}
	m := box.Members
	start := r.cfg.Now()
	// Only a peer's query that passed the credential check is recorded, so
	// nobody outside the mesh can make a node ignore a query.
	if forwarded && r.duplicate(hop.RootQueryID, start) {
		return answeredBefore(m, hop, start), nil
	}
	own, err := local(ctx)
	if err != nil {
		return own, err
	}
	if forwarded {
		if hop.TTL <= 0 {
			return own, nil
		}
	} else {
		if !unservedHere(own) {
			return own, nil
		}
		self := m.Self()
		hop = Hop{QueryID: own.QueryID, RootQueryID: own.QueryID, Coordinator: self.NodeID, TTL: r.cfg.TTL, Visited: []string{self.NodeID}, BudgetMs: r.cfg.Total.Milliseconds()}
		r.duplicate(hop.RootQueryID, start)
	}
	req, err := promcp.ParseCanDo(args)
	if err != nil {
		return own, nil // the local report already says what is malformed
	}
	budget := time.Duration(hop.BudgetMs) * time.Millisecond
	ctx, cancel := context.WithDeadline(ctx, start.Add(budget))
	defer cancel()
	rep := r.fanOut(ctx, m, req, args, hop, own)
	if !forwarded {
		callerMayNot(&rep, m.Self().DeviceID, role)
		rep.Metadata.TotalLatencyMs = r.cfg.Now().Sub(start).Milliseconds() // its own dry runs included
	}
	return rep, nil
}

// callerMayNot moves to blocked the peers' candidates whose call the
// caller's role here does not pass: a peer answers for the role its policy
// gives this node (identity.mesh.role), never the caller's, and says in
// constraints what the call itself asks (min_role, roles; only acting
// candidates do). The caller would be refused at the device, so the query
// is not feasible for it there.
func callerMayNot(rep *promcp.CapabilityReport, self string, role manifest.Role) {
	n := len(rep.Candidates)
	rep.Candidates = slices.DeleteFunc(rep.Candidates, func(c promcp.Candidate) bool {
		why := roleRefusal(c.Constraints, role)
		if why == "" || c.DeviceID == self {
			return false
		}
		rep.Blocked = append(rep.Blocked, promcp.Blocked{Capability: c.Capability, Source: c.Source, Permission: promcp.PermissionInsufficient,
			Reason: why, Confidence: c.Confidence, MatchReasons: c.MatchReasons, AdoptedFrom: c.AdoptedFrom, DeviceID: c.DeviceID, Endpoint: c.Endpoint})
		return true
	})
	if len(rep.Candidates) < n {
		promcp.DeriveFeasible(rep)
	}
}

// roleRefusal says why role does not pass the roles constraints ask ("":
// it does, or they ask none).
func roleRefusal(c promcp.Constraints, role manifest.Role) string {
	name := string(role)
	if role == "" {
		name = string(manifest.RoleNone)
	}
	switch {
	case c.MinRole == "" && len(c.Roles) == 0:
		return ""
	case !manifest.ValidRole(manifest.Role(c.MinRole)):
		// ranked below every role, it would pass them all
		return fmt.Sprintf("the device asks role %q for the call, which is not a role here (%s)", c.MinRole, manifest.RoleNames())
	case role == manifest.RoleViewer:
		return "the call changes the device; the caller has role viewer here (read_* and can_do only)"
	case c.Roles != nil && !slices.Contains(c.Roles, name):
		return fmt.Sprintf("the device admits only roles %s for the call; the caller has role %s here", strings.Join(c.Roles, ", "), name)
	case !role.AtLeast(manifest.Role(c.MinRole)):
		return fmt.Sprintf("the device asks role %s or higher for the call; the caller has role %s here", c.MinRole, name)
	}
	return ""
}

// unservedHere reports whether this node has nothing for the query: no
// candidate, nothing blocked, and only "no producer" as the reason (a
// malformed query is not the mesh's business).
func unservedHere(rep promcp.CapabilityReport) bool {
	if len(rep.Candidates) > 0 || len(rep.Blocked) > 0 || len(rep.Unroutable) == 0 {
		return false
	}
	for _, u := range rep.Unroutable {
		if u.Reason != promcp.NoProducer {
			return false
		}
	}
	return true
}

// duplicate records a root query id and reports whether it was seen within
// the dedup window.
func (r *Router) duplicate(root string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, until := range r.seen {
		if now.After(until) {
			delete(r.seen, k)
		}
	}
	if until, ok := r.seen[root]; ok && !now.After(until) {
		return true
	}
	r.seen[root] = now.Add(r.cfg.Dedup)
	return false
}

// answeredBefore answers a query this node has answered already on another
// path: nothing, so each device is reported once, and marked
// duplicate_query, so the peer that asked counts this node neither as a
// response nor as a second peer consulted (its answer counts on the path
// that got it).
func answeredBefore(m Members, hop Hop, now time.Time) promcp.CapabilityReport {
	return promcp.CapabilityReport{
		QueryID: promcp.NewUUID(), Candidates: []promcp.Candidate{}, Blocked: []promcp.Blocked{}, Unroutable: []promcp.Unroutable{},
		Context: promcp.ReportContext{RelatedReads: []string{}, CurrentObservations: map[string]any{}},
		Metadata: promcp.ReportMetadata{Timestamp: promcp.Time(now), DeviceID: m.Self().DeviceID, PromcpBase: promcp.BaseVersion,
			MeshMetadata: &promcp.MeshMetadata{CoordinatorNode: hop.Coordinator, MeshSizeEstimate: max(1, m.SizeEstimate()),
				PartitionState: m.PartitionState(), DuplicateQuery: true}},
	}
}

type answer struct {
	peer mesh.Peer
	rep  promcp.CapabilityReport
	err  error
}

// fanOut asks up to Fanout matching alive peers in parallel, waits for them
// until ctx's deadline, and merges what came back into local.
func (r *Router) fanOut(ctx context.Context, m Members, req promcp.CanDoRequest, args map[string]any, hop Hop, local promcp.CapabilityReport) promcp.CapabilityReport {
	self := m.Self()
	ask, offline := r.choose(m, req, hop)
	visited := slices.Clone(hop.Visited)
	for _, p := range ask {
		visited = append(visited, p.NodeID)
	}
	deadline, _ := ctx.Deadline()
	answers := make(chan answer, len(ask))
	for _, p := range ask {
		child := Hop{QueryID: promcp.NewUUID(), ParentQueryID: hop.QueryID, RootQueryID: hop.RootQueryID, Coordinator: hop.Coordinator, From: self.NodeID, TTL: hop.TTL - 1, Visited: visited}
		// A peer that forwards again needs time for its own hop; it answers
		// a little before our deadline so its answer is not cut off in transit.
		wait := min(deadline.Sub(r.cfg.Now()), r.cfg.PerHop*time.Duration(child.TTL+1))
		child.BudgetMs = max(1, (wait - wait/10).Milliseconds())
		go func() {
			cctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			rep, err := r.ask.Ask(cctx, p, args, child)
			answers <- answer{p, rep, err}
		}()
	}
	mm := &promcp.MeshMetadata{
		CoordinatorNode: hop.Coordinator, FanoutUsed: len(ask), PeersConsulted: len(ask),
		MeshSizeEstimate: max(1, m.SizeEstimate()), PartitionState: m.PartitionState(),
	}
	out := local
	out.Candidates = slices.Clone(local.Candidates)
	out.Blocked = slices.Clone(local.Blocked)
	out.Context.RelatedReads = slices.Clone(local.Context.RelatedReads)
	seen := map[string]bool{key(self.DeviceID, ""): true}
	for _, p := range offline {
		out.Blocked = append(out.Blocked, offlineEntry(p, fmt.Sprintf("%s is %s in the mesh since %s", p.DeviceID, p.State, promcp.Time(p.Since))))
	}
	remote := len(offline) > 0
	answered := map[string]bool{}
	for waiting := true; waiting && len(answered) < len(ask); {
		select {
		case a := <-answers:
			answered[a.peer.NodeID] = true
			if a.err != nil {
				if errors.Is(a.err, context.DeadlineExceeded) {
					mm.DroppedLate()
				}
				out.Blocked = append(out.Blocked, offlineEntry(a.peer, a.err.Error()))
				remote = true
				continue
			}
			if pm := a.rep.Metadata.MeshMetadata; pm != nil && pm.DuplicateQuery {
				mm.PeersConsulted-- // it answered on another path and counts there
				continue
			}
			mm.Answered(a.rep.Metadata.MeshMetadata)
			if merge(&out, a.peer, a.rep, seen) {
				remote = true
			}
		case <-ctx.Done():
			waiting = false
		}
	}
	for _, p := range ask {
		if !answered[p.NodeID] {
			// Its answer, should it come, is dropped: PhysMCP never returns late answers.
			mm.DroppedLate()
			out.Blocked = append(out.Blocked, offlineEntry(p, fmt.Sprintf("no answer within the query's %d ms", hop.BudgetMs)))
			remote = true
		}
	}
	oneAccountPerDevice(&out)
	if remote {
		out.Unroutable = slices.DeleteFunc(slices.Clone(out.Unroutable), func(u promcp.Unroutable) bool { return u.Reason == promcp.NoProducer })
	} else if len(out.Unroutable) > 0 && len(ask) == 0 {
		out.Unroutable = slices.Clone(out.Unroutable)
		out.Unroutable[0].Detail += fmt.Sprintf("; no peer of the mesh (%d nodes) may serve it", mm.MeshSizeEstimate)
	}
	slices.SortStableFunc(out.Candidates, func(a, b promcp.Candidate) int {
		switch {
		case a.Confidence > b.Confidence:
			return -1
		case a.Confidence < b.Confidence:
			return 1
		}
		return 0
	})
	// The merged answer is capped like each node's own (offline peers are
	// always listed), the peers' omissions added to its own.
	promcp.CapReport(&out, req.Limit())
	promcp.DeriveFeasible(&out)
	out.Metadata.MeshMetadata = mm
	return out
}
