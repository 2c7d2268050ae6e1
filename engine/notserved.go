package engine

import (
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// An aggregator may be offered one tool name by two devices; one serves it,
// and the other's capability is not served (manifest.NotServed). An agent
// asking can_do for it learns so, blocked with the reason, instead of not
// finding the second device at all.

// unserved is a capability the engine does not serve, with a point that
// carries only what can_do matches on: nothing is bound to it.
type unserved struct {
	pt *point
	ns *manifest.NotServed
}

func unservedOf(m *manifest.Manifest) []unserved {
	out := make([]unserved, 0, len(m.NotServed))
	for _, ns := range m.NotServed {
		c := ns.Capability
		pt := &point{c: c, tool: c.ToolName(), nameWords: words(c.Name), adopted: m.AdoptedFrom(c)}
		pt.vocab = vocabulary(c, pt.nameWords)
		out = append(out, unserved{pt: pt, ns: ns})
	}
	return out
}

// unservedMatches are the capabilities not served that match in, blocked
// physmcp:not_served with their reason (they are few: no index).
func (e *Engine) unservedMatches(in query, scope []string) []hit {
	var hits []hit
	for _, u := range e.catalog().unserved {
		if !e.inScope(u.pt, scope) {
			continue
		}
		if m, ok := e.match(u.pt, in); ok {
			hits = append(hits, hit{pt: u.pt, vocab: u.pt, m: m, d: decision{permission: promcp.NotServed, reason: u.ns.Reason}, notServed: u.ns})
		}
	}
	return hits
}
