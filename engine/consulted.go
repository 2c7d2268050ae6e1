package engine

import (
	"context"
	"sync"

	"github.com/physmcp/physmcpd/promcp"
)

// consulted accounts for the devices one can_do asked for their own
// judgement (adopted sources, assess) in PhysMCP's mesh metadata, as a mesh
// coordinator accounts for the peers it asks: an aggregator's site can_do
// coordinates its devices, and a caller reads its report as a mesh node's.
type consulted struct {
	mu      sync.Mutex
	sources map[string]asked // by source address
}

// asked is how a source answered, the worst of its answers in one can_do.
type asked int

const (
	askAnswered asked = iota
	askFailed         // an error other than the deadline (a refused connection): not late
	askLate           // no answer by the deadline
)

type consultedKey struct{}

// note records a source's answer to one question, if ctx accounts for them.
func noteAsked(ctx context.Context, source string, a asked) {
	c, ok := ctx.Value(consultedKey{}).(*consulted)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, seen := c.sources[source]; !seen || a > prev {
		c.sources[source] = a
	}
}

// metadata is the account, nil when no source was asked.
func (c *consulted) metadata(e *Engine) *promcp.MeshMetadata {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sources) == 0 {
		return nil
	}
	known := map[string]bool{}
	for _, pt := range e.catalog().points {
		if pt.adopted != nil {
			known[pt.adopted.SourceAddress] = true
		}
	}
	mm := &promcp.MeshMetadata{
		CoordinatorNode: e.deviceID(), FanoutUsed: len(c.sources), PeersConsulted: len(c.sources),
		MeshSizeEstimate: 1 + len(known), // this device and the sources it adopts from
		PartitionState:   "none",         // mesh.PartitionNone: this device knows of no partition
	}
	for _, a := range c.sources {
		switch a {
		case askAnswered:
			mm.Answered(nil)
		case askLate:
			mm.DroppedLate()
		}
	}
	return mm
}
