package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// can_do finds its matches through an index of the words it matches on,
// instead of scoring every capability: an intent about one zone of a site
// looks at the capabilities that carry its tags or its target's words.
// (The device's location, the zone, rules the whole device in or out at
// once: see elsewhere.) The tools of a catalog never change (adopting a
// device makes a new catalog), so each catalog's index is built once, at
// its first can_do.

type canDoIndex struct {
	// byWord: a semantic tag or a word of a capability's name → the
	// read_* and do_* tools (positions in the catalog's tools, ascending) whose
	// vocabulary holds it.
	byWord map[string][]int
	// readsByTag: a semantic tag → the read_* tools that declare it, for
	// related_reads.
	readsByTag map[string][]int
	// ops are the operations' tools (start_*, do_cancel_*, sequences).
	ops []int
}

func (cat *catalog) canDoIndex() *canDoIndex {
	cat.index.once.Do(func() {
		x := &canDoIndex{byWord: map[string][]int{}, readsByTag: map[string][]int{}}
		for i, t := range cat.tools {
			switch t.Kind {
			case ToolRead, ToolDo:
				pt := cat.points[t.Name]
				for w := range pt.vocab {
					x.byWord[w] = append(x.byWord[w], i)
				}
				if t.Kind == ToolRead {
					for _, tag := range slices.Compact(slices.Sorted(slices.Values(pt.c.SemanticTags))) {
						x.readsByTag[tag] = append(x.readsByTag[tag], i)
					}
				}
			case ToolStart, ToolCancel, ToolSequence:
				x.ops = append(x.ops, i)
			}
		}
		cat.index.x = x
	})
	return cat.index.x
}

// lookup is the tools (positions in the catalog's tools, ascending, each once) listed
// under any of words.
func lookup(in map[string][]int, words []string) []int {
	var out []int
	for _, w := range words {
		out = append(out, in[w]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hit is a tool that matched a can_do intent, and its dry run.
type hit struct {
	// pt is the capability; for an operation's tool, the point it drives
	// (nil for a sequence).
	pt *point
	// op is the operation's tool; nil for read_* and do_*.
	op *Tool
	// vocab is what matched: pt, or the operation's vocabulary.
	vocab *point
	m     match
	d     decision
	// notServed is the capability behind a hit not served (notserved.go).
	notServed *manifest.NotServed
}

// pointMatches appends to hits the read_* and do_* tools in scope that match
// in, in the engine's order. Only the tools that carry one of the intent's
// tags, or a word of its target, can match (see match), and only those are
// scored.
func (e *Engine) pointMatches(hits []hit, in query, scope []string) []hit {
	cat := e.catalog()
	found := lookup(cat.canDoIndex().byWord, append(slices.Clip(in.tags), in.targetWords...))
	hits = slices.Grow(hits, len(found))
	for _, i := range found {
		pt := cat.points[cat.tools[i].Name]
		if !e.inScope(pt, scope) {
			continue
		}
		if m, ok := e.match(pt, in); ok {
			hits = append(hits, hit{pt: pt, vocab: pt, m: m})
		}
	}
	return hits
}

// dryRuns runs the hits' dry runs. Those that may wait on a device (an
// adopted one judging the action itself, a read because nothing is known
// yet, an interlock's source) run in parallel: one hung device must cost the
// others nothing, as the mesh asks its peers in parallel. The rest only
// look at the engine's own state and run here, without a goroutine each.
func (e *Engine) dryRuns(ctx context.Context, caller Caller, in promcp.Intent, hits []hit) {
	var wg sync.WaitGroup
	for i := range hits {
		if h := &hits[i]; mayWait(h.pt) {
			wg.Go(func() { h.d = e.dryRun(ctx, h.pt, caller, in) })
		} else {
			h.d = e.dryRun(ctx, h.pt, caller, in)
		}
	}
	wg.Wait()
}

// mayWait reports whether pt's dry run may ask the device.
func mayWait(pt *point) bool {
	if _, judges := pt.drv.(drivers.Assessor); judges {
		return true
	}
	if pt.c.Kind == manifest.KindDo && len(pt.c.Interlocks) > 0 {
		return true
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.last == nil || pt.lastErr != nil
}

// hitCandidate is the candidate entry of a hit the report keeps.
func (e *Engine) hitCandidate(ctx context.Context, in query, h *hit, now time.Time) promcp.Candidate {
	reasons := e.reasons(h.vocab, in, h.m)
	if h.op != nil {
		return e.opCandidate(ctx, *h.op, h.pt, h.m, reasons, h.d, now)
	}
	return e.candidate(ctx, h.pt, h.m, reasons, h.d, now)
}

// hitBlocked is the blocked entry of a hit the report keeps.
func (e *Engine) hitBlocked(in query, h *hit) promcp.Blocked {
	d := h.d
	b := promcp.Blocked{
		Capability: h.vocab.tool, Source: e.deviceID(), Permission: d.permission, Reason: d.reason,
		Confidence: h.m.confidence, MatchReasons: e.reasons(h.vocab, in, h.m),
	}
	if h.op == nil {
		b.AdoptedFrom = h.pt.adopted
		if h.pt.adopted != nil && d.permission == promcp.SourceUnreachable {
			// PhysMCP's word for a lost device, as its blocked entries name it
			b.Reason = "device_offline: " + b.Reason
		}
		if h.notServed != nil {
			b.DeviceID = h.notServed.Device
		}
	}
	if !d.clearsAt.IsZero() {
		b.ClearsAt = promcp.Time(d.clearsAt)
		details := fmt.Sprintf("may clear at %s", b.ClearsAt)
		b.Details = &details
	}
	return b
}

// relatedReads lists read tools that share tags with the intent, those that
// share the most first (ties in catalog order), with what the cache already
// knows of them (can_do does not read them all). It lists them all: the edge
// caps the list (promcp.CapReads) after leaving out what it does not serve.
func (e *Engine) relatedReads(rep *promcp.CapabilityReport, in promcp.Intent) {
	tags := make([]string, len(in.SemanticTags))
	for i, t := range in.SemanticTags {
		tags[i] = strings.ToLower(strings.TrimSpace(t))
	}
	tags = slices.Compact(slices.Sorted(slices.Values(tags)))
	cat := e.catalog()
	byTag := cat.canDoIndex().readsByTag
	shared := map[int]int{}
	for _, t := range tags {
		for _, i := range byTag[t] {
			shared[i]++
		}
	}
	reads := lookup(byTag, tags)
	slices.SortStableFunc(reads, func(a, b int) int { return shared[b] - shared[a] })
	for _, i := range reads {
		pt := cat.points[cat.tools[i].Name]
		rep.Context.RelatedReads = append(rep.Context.RelatedReads, pt.tool)
		pt.mu.Lock()
		r := pt.last
		pt.mu.Unlock()
		if r != nil {
			rep.Context.CurrentObservations[pt.tool] = map[string]any{
				"value": r.value, "unit": unitOf(pt.c), "timestamp": r.stamp,
			}
		}
	}
}
