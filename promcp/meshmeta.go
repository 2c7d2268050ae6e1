package promcp

// Answered counts the answer of a node that was consulted, with what its own
// report says it consulted in turn (nil when it asked nobody): one hop more.
func (m *MeshMetadata) Answered(peer *MeshMetadata) {
	m.ResponsesReceived++
	m.TTLUsed = max(m.TTLUsed, 1)
	if peer != nil {
		m.PeersConsulted += peer.PeersConsulted
		m.ResponsesReceived += peer.ResponsesReceived
		m.ResponsesDroppedLate += peer.ResponsesDroppedLate
		m.TTLUsed = max(m.TTLUsed, peer.TTLUsed+1)
	}
}

// DroppedLate counts a node that was consulted and did not answer by the
// deadline; its answer, should it come, is not used.
func (m *MeshMetadata) DroppedLate() { m.ResponsesDroppedLate++ }
