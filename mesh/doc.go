// Package mesh is a physmcpd node's membership in the PhysMCP mesh: which
// other nodes there are, what they say of themselves, whether they are
// alive, and whether the mesh seems split. It knows nothing of MCP tools;
// distributed can_do and quorum build on it (docs/mesh.md has the wire
// formats and the security model).
//
// Membership and failure detection are hashicorp/memberlist's (SWIM:
// probes, indirect probes, suspicion with refutation, AES-GCM gossip under a
// shared keyring). Discovery is seed peers first, then mDNS (_physmcp._tcp,
// hashicorp/mdns), then whatever gossip spreads. PhysMCP's heartbeat
// semantics map onto memberlist's timing as Timing describes.
//
// Use:
//
//	m, err := mesh.Start(mesh.Config{DeviceID: "pump_01", Zone: "greenhouse_a", Endpoint: url,
//		CapsHash: mesh.Describe(man, "full", e.Roles).CapsHash, Tags: mesh.Digest(mesh.MatchWords(man)),
//		BindAddr: "0.0.0.0", BindPort: 7946, SeedPeers: seeds, MaxPeers: 10,
//		HeartbeatInterval: time.Second, MDNS: true, Keys: keys})
//	defer m.Close() // peers see this node as left, not dead
//
//	m.Self()              // this node as peers see it
//	m.Peers()             // every other node known, with State (alive, suspected, dead, left), Since, LastSeen
//	m.Peer("pump_02")     // one of them, by node id or device id
//	m.Alive("zone_a")     // alive peers in a zone ("" any), this node not counted: a quorum is 1 + Alive
//	m.SizeEstimate()      // nodes believed in the mesh, this one included (mesh_size_estimate)
//	m.PartitionState()    // none, suspected or healing (partition_state)
//	m.Partition()         // the same with reachable_before, reachable and Minority()
//	m.Status()            // what physmcp/mesh_status answers
//	ev, cancel := m.Subscribe(64) // joined, state changes, metadata updates, partition changes
//
// A peer's Tags is a Bloom filter of its match words: Tags.MayHave("soil")
// false means the peer certainly has no capability tagged or named soil,
// and Tags.MayHave(mesh.LocationPrefix+"north_bay") asks about its location.
// A peer's CapsHash changes whenever its physmcp/manifest document
// (Describe) would, so a cached document is refetched when it differs.
//
// Peers are reachable (may be called) when alive or suspected; dead and left
// peers stay listed for ten minutes so that callers can name them offline.
// A node on the minority side of a suspected partition
// (Partition().Minority()) must not act on a quorum.
package mesh
