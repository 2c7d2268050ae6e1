package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/mdns"
	"github.com/hashicorp/memberlist"
)

// State is a peer's membership state, in PhysMCP's words.
type State string

const (
	Alive   State = "alive"
	Suspect State = "suspected"
	Dead    State = "dead"
	// Left is a peer that said goodbye (a clean shutdown): offline, not failed.
	Left State = "left"
)

// Peer is one node as this node knows it.
type Peer struct {
	NodeID   string    `json:"node_id"`
	DeviceID string    `json:"device_id"`
	Zone     string    `json:"zone,omitempty"`
	Profile  string    `json:"profile,omitempty"`
	Endpoint string    `json:"endpoint,omitempty"`
	CapsHash string    `json:"capabilities_hash,omitempty"`
	Tags     TagDigest `json:"tag_digest"`
	// Addr is the peer's gossip address, HOST:PORT.
	Addr  string `json:"gossip_addr"`
	State State  `json:"state"`
	// Since is when State was entered (as seen here).
	Since time.Time `json:"state_since"`
	// LastSeen is the last time this node knew the peer alive: now for an
	// alive peer (to within a quarter heartbeat), the moment before the
	// suspicion for a suspected or dead one.
	LastSeen time.Time `json:"last_seen"`
}

// Reachable reports whether the peer may be called: alive, or suspected
// (not yet confirmed dead, and it may refute).
func (p Peer) Reachable() bool { return p.State == Alive || p.State == Suspect }

// EventKind says what an Event reports.
type EventKind string

const (
	// PeerJoined: a node not known before (or known dead) is alive.
	PeerJoined EventKind = "joined"
	// PeerChanged: a known peer changed state (Event.From to Peer.State).
	PeerChanged EventKind = "state"
	// PeerUpdated: a peer's metadata changed (endpoint, capabilities hash...).
	PeerUpdated EventKind = "updated"
	// PartitionChanged: the partition state changed (Event.Partition).
	PartitionChanged EventKind = "partition"
)

// Event is one change of membership.
type Event struct {
	Kind      EventKind
	Peer      Peer
	From      State
	Partition Partition
	At        time.Time
}

// deadRetention is how long a dead or departed peer stays listed (so that
// can_do can name it offline) before it is forgotten.
const deadRetention = partitionForget

// Scouting periods: how often a node looks again for peers it lost or has
// not found (seed peers, dead peers' addresses, mDNS); faster while alone
// or while a partition is suspected or healing (PhysMCP: 5 s instead of 30 s).
const (
	scoutEvery = 30 * time.Second
	scoutFast  = 5 * time.Second
)

// Mesh is this node's membership in the mesh.
type Mesh struct {
	cfg   Config
	log   *slog.Logger
	ml    *memberlist.Memberlist
	mdns  *mdns.Server
	mdnsS string // off, on, unavailable
	ids   []string
	// states reads memberlist's node states (nil: the API's view only).
	states *stateReader

	mu      sync.Mutex
	self    Peer
	peers   map[string]*Peer // by node id, without this node
	det     detector
	subs    map[chan Event]struct{}
	refused map[string]bool // node ids refused by max_peers, logged once
	// refusals counts the announcements max_peers refused: a refused node
	// is refused again at each announcement gossip brings.
	refusals int

	wake    chan struct{} // scout now
	poke    chan struct{} // read the member states now
	stop    chan struct{}
	stopped sync.WaitGroup
	closed  sync.Once
}

// Start joins the mesh: it listens for gossip, advertises this node over
// mDNS, then contacts the seed peers and browses mDNS in the background
// (Start does not wait for peers). Close leaves.
func Start(cfg Config) (*Mesh, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m := &Mesh{
		cfg: cfg, log: cfg.Logger, peers: map[string]*Peer{}, det: newDetector(),
		subs: map[chan Event]struct{}{}, refused: map[string]bool{},
		wake: make(chan struct{}, 1), poke: make(chan struct{}, 1), stop: make(chan struct{}), mdnsS: "off",
	}
	m.self = Peer{NodeID: cfg.NodeID, DeviceID: cfg.DeviceID, Zone: cfg.Zone, Profile: cfg.Profile, Endpoint: cfg.Endpoint,
		CapsHash: cfg.CapsHash, Tags: cfg.Tags, State: Alive}
	meta, err := m.selfMeta().encode()
	if err != nil {
		return nil, fmt.Errorf("mesh: %v", err)
	}
	mc, err := cfg.memberlistConfig()
	if err != nil {
		return nil, fmt.Errorf("mesh: %v", err)
	}
	d := &delegates{m: m, meta: meta}
	mc.Delegate, mc.Events, mc.Alive, mc.Conflict = d, d, d, d
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("mesh: gossip on %s: %v", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	m.ml = ml
	if m.states, err = newStateReader(ml); err != nil {
		m.log.Warn("mesh: peers will show alive or dead, never suspected or left", "err", err)
	}
	now := time.Now()
	m.mu.Lock()
	m.self.Addr = ml.LocalNode().Address()
	m.self.Since, m.self.LastSeen = now, now
	m.mu.Unlock()
	m.ids = keyIDs(cfg.Keys)
	if cfg.MDNS {
		m.startMDNS()
	}
	m.stopped.Add(2)
	go m.watch()
	go m.scout()
	m.log.Info("mesh: joined as "+cfg.NodeID, "gossip", m.self.Addr, "encrypted", len(cfg.Keys) > 0, "mdns", m.mdnsS,
		"seed_peers", cfg.SeedPeers, "heartbeat", cfg.HeartbeatInterval)
	return m, nil
}

func (m *Mesh) selfMeta() nodeMeta {
	return nodeMeta{V: metaVersion, Device: m.cfg.DeviceID, Zone: m.cfg.Zone, Profile: m.cfg.Profile,
		Endpoint: m.cfg.Endpoint, CapsHash: m.cfg.CapsHash, Tags: m.cfg.Tags}
}

// Close leaves the mesh (peers see this node as left, not dead) and stops.
func (m *Mesh) Close() error {
	var err error
	m.closed.Do(func() {
		close(m.stop)
		m.stopped.Wait()
		if m.mdns != nil {
			_ = m.mdns.Shutdown()
		}
		if lerr := m.ml.Leave(2 * m.cfg.HeartbeatInterval); lerr != nil {
			m.log.Debug("mesh: leave", "err", lerr)
		}
		err = m.ml.Shutdown()
		m.mu.Lock()
		for ch := range m.subs {
			close(ch)
			delete(m.subs, ch)
		}
		m.mu.Unlock()
	})
	return err
}

// Self is this node.
func (m *Mesh) Self() Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.self
	p.LastSeen = time.Now()
	return p
}

// Peers lists the other nodes this node knows, alive or not (dead and
// departed ones for deadRetention), sorted by node id.
func (m *Mesh) Peers() []Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Peer, 0, len(m.peers))
	for _, p := range m.peers {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// Peer returns the peer with this node id or device id.
func (m *Mesh) Peer(id string) (Peer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.peers[id]; ok {
		return *p, true
	}
	for _, p := range m.peers {
		if p.DeviceID == id {
			return *p, true
		}
	}
	return Peer{}, false
}

// Alive counts the alive peers in zone ("" for any zone), without this node:
// a quorum of "this node and N peers" is 1 + Alive(zone).
func (m *Mesh) Alive(zone string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, p := range m.peers {
		if p.State == Alive && (zone == "" || p.Zone == zone) {
			n++
		}
	}
	return n
}

// SizeEstimate is the number of nodes this node believes are in the mesh,
// itself included: alive and suspected ones (PhysMCP mesh_size_estimate).
func (m *Mesh) SizeEstimate() int { return m.ml.NumMembers() }

// PartitionState is none, suspected or healing (PhysMCP partition_state).
func (m *Mesh) PartitionState() string { return m.Partition().State }

// Partition is the partition detector's view.
func (m *Mesh) Partition() Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.det.p
}

// Timing is the failure detector's timing at the current mesh size.
func (m *Mesh) Timing() Timing { return TimingFor(m.cfg.HeartbeatInterval, m.SizeEstimate()) }

// Subscribe returns a channel of membership events, buffered by buffer. A
// subscriber that falls behind loses events (never blocks the mesh) and
// should re-read Peers. cancel ends the subscription; Close closes the channel.
func (m *Mesh) Subscribe(buffer int) (events <-chan Event, cancel func()) {
	ch := make(chan Event, max(buffer, 1))
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[ch]; ok {
			delete(m.subs, ch)
			close(ch)
		}
	}
}

// emitLocked sends ev to every subscriber that has room. m.mu is held.
func (m *Mesh) emitLocked(ev Event) {
	for ch := range m.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// Status is what physmcp/mesh_status answers.
type Status struct {
	Enabled      bool      `json:"enabled"`
	Self         Peer      `json:"self"`
	SizeEstimate int       `json:"mesh_size_estimate"`
	Alive        int       `json:"alive_peers"`
	Suspected    int       `json:"suspected_peers"`
	Dead         int       `json:"dead_peers"`
	Left         int       `json:"left_peers"`
	Partition    Partition `json:"partition"`
	// PartitionState repeats Partition.State under PhysMCP's name.
	PartitionState string `json:"partition_state"`
	MaxPeers       int    `json:"max_peers"`
	// MaxPeersRefused counts the announcements of new nodes refused since
	// start because max_peers peers were alive (a node is logged once, and
	// refused at each announcement): rising means max_peers is too low, or
	// nodes that should not be there keep trying.
	MaxPeersRefused int `json:"max_peers_refused"`
	Timing          struct {
		HeartbeatMs     int64 `json:"heartbeat_interval_ms"`
		ProbeTimeoutMs  int64 `json:"probe_timeout_ms"`
		SuspectWithinMs int64 `json:"suspect_within_ms"`
		// SuspectAtLatestMs bounds what SuspectWithinMs usually is.
		SuspectAtLatestMs int64 `json:"suspect_at_latest_ms"`
		DeadAfterMs       int64 `json:"dead_after_suspect_ms"`
	} `json:"timing"`
	MDNS      string `json:"mdns"`
	Encrypted bool   `json:"encrypted"`
	// Health is memberlist's health score (Lifeguard's self-awareness), 0
	// to 7: 0 is healthy. This node suspects a silent peer Health
	// heartbeats later than Timing says (Timing.Slowed).
	Health int `json:"health_score"`
	// Slowdown is Health+1: how many times the heartbeat this node's probe
	// of a silent peer waits before it suspects it.
	Slowdown int `json:"detection_slowdown"`
}

// Status summarises this node's membership.
func (m *Mesh) Status() Status {
	s := Status{Enabled: true, Self: m.Self(), SizeEstimate: m.SizeEstimate(), MaxPeers: m.cfg.MaxPeers,
		MDNS: m.mdnsS, Encrypted: len(m.cfg.Keys) > 0, Health: m.ml.GetHealthScore()}
	s.Slowdown = s.Health + 1
	m.mu.Lock()
	s.MaxPeersRefused = m.refusals
	m.mu.Unlock()
	for _, p := range m.Peers() {
		switch p.State {
		case Alive:
			s.Alive++
		case Suspect:
			s.Suspected++
		case Dead:
			s.Dead++
		case Left:
			s.Left++
		}
	}
	s.Partition = m.Partition()
	s.PartitionState = s.Partition.State
	t := TimingFor(m.cfg.HeartbeatInterval, s.SizeEstimate)
	s.Timing.HeartbeatMs = t.Interval.Milliseconds()
	s.Timing.ProbeTimeoutMs = t.ProbeTimeout.Milliseconds()
	s.Timing.SuspectWithinMs = t.SuspectWithin.Milliseconds()
	s.Timing.SuspectAtLatestMs = t.SuspectAtLatest.Milliseconds()
	s.Timing.DeadAfterMs = t.DeadAfter.Milliseconds()
	return s
}

// watch follows memberlist's view of the peers: every quarter heartbeat
// (suspicion has no event), and at once after a peer leaves or dies. It also
// feeds the partition detector and forgets long-dead peers.
func (m *Mesh) watch() {
	defer m.stopped.Done()
	tick := time.NewTicker(max(m.cfg.HeartbeatInterval/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		case <-m.poke:
		}
		m.sync()
	}
}

func (m *Mesh) sync() {
	var views map[string]nodeView
	if m.states != nil {
		views = m.states.read()
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, p := range m.peers {
		state, since := p.State, now
		if v, ok := views[id]; ok {
			state, since = stateOf(v.state), v.change
		} else if m.states != nil && p.Reachable() {
			state = Dead // memberlist forgot it: it was reaped after death
		}
		if state == Alive {
			p.LastSeen = now
		}
		m.setStateLocked(p, state, since)
		if !p.Reachable() && now.Sub(p.Since) > deadRetention {
			delete(m.peers, id)
		}
	}
	m.observeLocked(now)
}

func (m *Mesh) pokeWatch() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// observeLocked feeds the partition detector. m.mu is held.
func (m *Mesh) observeLocked(now time.Time) {
	n := 0
	for _, p := range m.peers {
		if p.State == Alive {
			n++
		}
	}
	if m.det.observe(now, n) {
		p := m.det.p
		lvl := slog.LevelWarn
		if p.State == PartitionNone {
			lvl = slog.LevelInfo
		}
		m.log.Log(context.Background(), lvl, "mesh: partition "+p.State, "reachable", p.Reachable, "before", p.Before, "minority", p.Minority())
		m.emitLocked(Event{Kind: PartitionChanged, Partition: p, At: now})
		m.scoutNow()
	}
}

// setStateLocked moves p to state, entered at since, logging and emitting
// the change. m.mu is held.
func (m *Mesh) setStateLocked(p *Peer, state State, since time.Time) {
	if p.State == state {
		return
	}
	from := p.State
	p.State, p.Since = state, since
	lvl := slog.LevelInfo
	if state == Suspect || state == Dead {
		lvl = slog.LevelWarn
	}
	m.log.Log(context.Background(), lvl, "mesh: peer "+string(state), "node", p.NodeID, "was", string(from), "addr", p.Addr,
		"last_seen", p.LastSeen.Format(time.RFC3339Nano))
	m.emitLocked(Event{Kind: PeerChanged, Peer: *p, From: from, At: since})
}

func (m *Mesh) scoutNow() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// scout looks for peers: seed peers first, then mDNS, then (every period)
// the addresses of lost peers, which is how the two sides of a healed
// partition find each other again. Peers learned by gossip need nothing:
// memberlist spreads them.
func (m *Mesh) scout() {
	defer m.stopped.Done()
	for {
		m.scoutOnce()
		period := scoutEvery
		if m.Alive("") == 0 || m.PartitionState() != PartitionNone {
			period = scoutFast
		}
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-time.After(period):
		}
	}
}

func (m *Mesh) scoutOnce() {
	var addrs []string
	if m.Alive("") == 0 {
		for _, s := range m.cfg.SeedPeers {
			addrs = append(addrs, seedAddr(s))
		}
	}
	if m.mdns != nil {
		addrs = append(addrs, m.browse()...)
	}
	for _, p := range m.Peers() {
		if !p.Reachable() && p.Addr != "" {
			addrs = append(addrs, p.Addr)
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) == 0 {
		return
	}
	n, err := m.ml.Join(addrs)
	if err != nil {
		m.log.Debug("mesh: scouting", "contacted", n, "tried", addrs, "err", err)
	}
}

// delegates implements memberlist's callbacks. They run under memberlist's
// own locks: they take m.mu and never call back into memberlist.
type delegates struct {
	m    *Mesh
	meta []byte
}

func (d *delegates) NodeMeta(limit int) []byte {
	if len(d.meta) > limit { // checked at Start against MaxMetaBytes
		return nil
	}
	return d.meta
}

func (d *delegates) NotifyMsg([]byte)                           {}
func (d *delegates) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegates) LocalState(join bool) []byte                { return nil }
func (d *delegates) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive admits a node: it must be a physmcpd node (its metadata
// decodes), and a node not known before is refused once max_peers peers are
// alive.
func (d *delegates) NotifyAlive(n *memberlist.Node) error {
	m := d.m
	if n.Name == m.cfg.NodeID {
		return nil
	}
	if _, err := decodeMeta(n.Meta); err != nil {
		return fmt.Errorf("node %s: %v", n.Name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.peers[n.Name]; known {
		return nil
	}
	alive := 0
	for _, p := range m.peers {
		if p.Reachable() {
			alive++
		}
	}
	if alive >= m.cfg.MaxPeers {
		m.refusals++
		if !m.refused[n.Name] {
			m.refused[n.Name] = true
			m.log.Warn("mesh: peer refused: max_peers reached", "node", n.Name, "max_peers", m.cfg.MaxPeers)
		}
		return errors.New("max_peers reached")
	}
	return nil
}

func (d *delegates) NotifyJoin(n *memberlist.Node) { d.update(n, true) }

func (d *delegates) NotifyUpdate(n *memberlist.Node) { d.update(n, false) }

func (d *delegates) update(n *memberlist.Node, joined bool) {
	m := d.m
	if n.Name == m.cfg.NodeID {
		return
	}
	nm, err := decodeMeta(n.Meta)
	if err != nil { // NotifyAlive refused it already; never listed
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p, known := m.peers[n.Name]
	if !known {
		p = &Peer{NodeID: n.Name}
		m.peers[n.Name] = p
	}
	old := *p
	p.DeviceID, p.Zone, p.Profile, p.Endpoint, p.CapsHash, p.Tags = nm.Device, nm.Zone, nm.Profile, nm.Endpoint, nm.CapsHash, nm.Tags
	p.Addr = n.Address()
	p.LastSeen = now
	switch {
	case !known || (joined && !old.Reachable()):
		p.State, p.Since = Alive, now
		m.log.Info("mesh: peer joined", "node", p.NodeID, "device", p.DeviceID, "zone", p.Zone, "addr", p.Addr, "endpoint", p.Endpoint)
		m.emitLocked(Event{Kind: PeerJoined, Peer: *p, From: old.State, At: now})
	case old.Endpoint != p.Endpoint || old.CapsHash != p.CapsHash || old.Tags != p.Tags || old.Zone != p.Zone || old.Profile != p.Profile || old.Addr != p.Addr:
		m.emitLocked(Event{Kind: PeerUpdated, Peer: *p, From: old.State, At: now})
	}
	m.observeLocked(now)
}

// NotifyLeave runs under memberlist's lock, where its state cannot be read:
// the watcher reads it as soon as the lock is released and tells a
// departure from a death. Without the state reader a leave counts as dead.
func (d *delegates) NotifyLeave(n *memberlist.Node) {
	m := d.m
	if m.states != nil {
		m.pokeWatch()
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.peers[n.Name]; ok {
		m.setStateLocked(p, Dead, now)
		m.observeLocked(now)
	}
}

func (d *delegates) NotifyConflict(existing, other *memberlist.Node) {
	d.m.log.Error("mesh: two nodes claim the same id (device ids must be unique)", "node", existing.Name,
		"known_addr", existing.Address(), "other_addr", other.Address())
}
