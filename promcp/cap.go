package promcp

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// DefaultMaxCandidates is how many candidates, how many blocked entries and
// how many related reads a CapabilityReport lists when the caller does not
// say (can_do's max_candidates). It is proMCP's advice of at most 8 tools per endpoint: on
// an endpoint that follows it, can_do never leaves anything out.
const DefaultMaxCandidates = 8

// Ranked is what the cap looks at in one candidate or blocked entry.
type Ranked struct {
	Confidence float64
	Permission Permission
	// Always marks an entry the cap never leaves out and does not count
	// (a mesh peer that is offline: it is about a whole device, not a match).
	Always bool
}

// Omitted says what a capped CapabilityReport left out (PhysMCP extension,
// metadata.omitted), so that nothing is dropped silently.
type Omitted struct {
	// MaxCandidates is the cap that applied to candidates, to blocked
	// entries and to related reads, each.
	MaxCandidates int            `json:"max_candidates"`
	Candidates    OmittedEntries `json:"candidates"`
	Blocked       OmittedEntries `json:"blocked"`
	// RelatedReads counts the context.related_reads left out (and with
	// them their current_observations).
	RelatedReads OmittedReads `json:"related_reads"`
	// Hint says how to see the rest: narrow the intent or raise the cap.
	Hint string `json:"hint"`
}

// OmittedEntries counts the entries of one list left out.
type OmittedEntries struct {
	Count int `json:"count"`
	// BestConfidence is the highest confidence among them (0 when none).
	BestConfidence float64 `json:"best_confidence"`
	// Permissions counts them by permission.
	Permissions map[Permission]int `json:"permissions"`
}

// OmittedReads counts the related reads left out: they have no confidence
// or permission to count by.
type OmittedReads struct {
	Count int `json:"count"`
}

// newOmitted is an empty account, its maps made: the schema has them as
// objects, never null.
func newOmitted() Omitted {
	return Omitted{Candidates: OmittedEntries{Permissions: map[Permission]int{}}, Blocked: OmittedEntries{Permissions: map[Permission]int{}}}
}

func (o *OmittedEntries) add(r Ranked) {
	o.Count++
	o.BestConfidence = max(o.BestConfidence, r.Confidence)
	o.Permissions[r.Permission]++
}

func (o *OmittedEntries) merge(p OmittedEntries) {
	o.Count += p.Count
	o.BestConfidence = max(o.BestConfidence, p.BestConfidence)
	for k, n := range p.Permissions {
		o.Permissions[k] += n
	}
}

// Cap chooses what a report that lists at most limit candidates and limit
// blocked entries keeps. It returns the positions kept, best first: ranked by
// confidence, ties in the order given. Of the candidates it keeps the best
// limit, but always the best allowed one (taking the last place), so that
// feasible says the same of the answer as of everything that matched. Of the
// blocked entries it keeps the best of each permission first (while there is
// room), then the best of the rest, so that every kind of refusal is shown
// and counted. Omitted is nil when nothing was left out.
func Cap(limit int, candidates, blocked []Ranked) (keepCandidates, keepBlocked []int, omitted *Omitted) {
	limit = max(limit, 1)
	om := newOmitted()
	keepCandidates = capList(limit, candidates, &om.Candidates, func(order []int, room int) []int {
		best := slices.Clone(order[:room])
		if !slices.ContainsFunc(best, func(i int) bool { return candidates[i].Permission == Allowed }) {
			if j := slices.IndexFunc(order, func(i int) bool { return candidates[i].Permission == Allowed }); j >= 0 {
				best[room-1] = order[j]
			}
		}
		return best
	})
	keepBlocked = capList(limit, blocked, &om.Blocked, func(order []int, room int) []int {
		var first []int
		shown := map[Permission]bool{}
		for _, i := range order {
			if len(first) < room && !shown[blocked[i].Permission] {
				shown[blocked[i].Permission] = true
				first = append(first, i)
			}
		}
		for _, i := range order {
			if len(first) < room && !slices.Contains(first, i) {
				first = append(first, i)
			}
		}
		return first
	})
	if om.Candidates.Count == 0 && om.Blocked.Count == 0 {
		return keepCandidates, keepBlocked, nil
	}
	om.MaxCandidates = limit
	om.Hint = omittedHint(om)
	return keepCandidates, keepBlocked, &om
}

// capList ranks list, keeps the entries marked Always and up to limit others
// (choose picks room of them from the ranked others), and counts the rest
// into om. The positions kept come back in rank order.
func capList(limit int, list []Ranked, om *OmittedEntries, choose func(order []int, room int) []int) []int {
	order := make([]int, 0, len(list))
	var always []int
	for i, r := range list {
		if r.Always {
			always = append(always, i)
		} else {
			order = append(order, i)
		}
	}
	byRank := func(a, b int) int {
		switch ca, cb := list[a].Confidence, list[b].Confidence; {
		case ca > cb:
			return -1
		case ca < cb:
			return 1
		}
		return a - b
	}
	slices.SortFunc(order, byRank)
	kept := order
	if len(order) > limit {
		kept = choose(order, limit)
		for _, i := range order {
			if !slices.Contains(kept, i) {
				om.add(list[i])
			}
		}
	}
	kept = append(kept, always...)
	slices.SortFunc(kept, byRank)
	return kept
}

// CapReport caps a report that is already built (a mesh coordinator's,
// merged from its peers' answers) as Cap does, keeping the omissions the
// peers reported.
func CapReport(rep *CapabilityReport, limit int) {
	cr := make([]Ranked, len(rep.Candidates))
	for i, c := range rep.Candidates {
		cr[i] = Ranked{Confidence: c.Confidence, Permission: c.Permission}
	}
	br := make([]Ranked, len(rep.Blocked))
	for i, b := range rep.Blocked {
		br[i] = Ranked{Confidence: b.Confidence, Permission: b.Permission, Always: b.Capability == "*"}
	}
	kc, kb, om := Cap(limit, cr, br)
	rep.Candidates = pick(rep.Candidates, kc)
	rep.Blocked = pick(rep.Blocked, kb)
	rep.Metadata.Omitted = MergeOmitted(rep.Metadata.Omitted, om)
	CapReads(rep, limit)
}

// CapReads keeps the first limit of a report's related reads (they come
// ranked, the most relevant first) and their current observations, and
// counts the rest in metadata.omitted.
func CapReads(rep *CapabilityReport, limit int) {
	limit = max(limit, 1)
	reads := rep.Context.RelatedReads
	if len(reads) <= limit {
		return
	}
	for _, r := range reads[limit:] {
		delete(rep.Context.CurrentObservations, r)
	}
	om := newOmitted()
	om.MaxCandidates = limit
	om.RelatedReads.Count = len(reads) - limit
	rep.Context.RelatedReads = reads[:limit:limit]
	rep.Metadata.Omitted = MergeOmitted(rep.Metadata.Omitted, &om)
}

func pick[T any](list []T, keep []int) []T {
	out := make([]T, len(keep))
	for i, k := range keep {
		out[i] = list[k]
	}
	return out
}

// MergeOmitted adds b's counts to a's (either may be nil) and writes the hint
// for the sum.
func MergeOmitted(a, b *Omitted) *Omitted {
	if a == nil && b == nil {
		return nil
	}
	out := newOmitted()
	for _, o := range []*Omitted{a, b} {
		if o != nil {
			out.MaxCandidates = max(out.MaxCandidates, o.MaxCandidates)
			out.Candidates.merge(o.Candidates)
			out.Blocked.merge(o.Blocked)
			out.RelatedReads.Count += o.RelatedReads.Count
		}
	}
	out.Hint = omittedHint(out)
	return &out
}

// omittedHint says what was left out and how to see it.
func omittedHint(o Omitted) string {
	var parts []string
	for _, l := range []struct {
		one, many string
		e         OmittedEntries
	}{{"candidate", "candidates", o.Candidates}, {"blocked entry", "blocked entries", o.Blocked}} {
		if l.e.Count == 0 {
			continue
		}
		what := l.many
		if l.e.Count == 1 {
			what = l.one
		}
		var perms []string
		for _, p := range slices.Sorted(maps.Keys(l.e.Permissions)) {
			perms = append(perms, fmt.Sprintf("%d %s", l.e.Permissions[p], p))
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s; best confidence %s)", l.e.Count, what, strings.Join(perms, ", "), Number(l.e.BestConfidence)))
	}
	switch n := o.RelatedReads.Count; {
	case n == 1:
		parts = append(parts, "1 related read")
	case n > 1:
		parts = append(parts, fmt.Sprintf("%d related reads", n))
	}
	if len(parts) == 0 {
		return "" // a peer's omitted that counts nothing
	}
	list := parts[len(parts)-1]
	if len(parts) > 1 {
		list = strings.Join(parts[:len(parts)-1], ", ") + " and " + list
	}
	return fmt.Sprintf("Left out: %s. To see them, narrow the intent (target, semantic_tags, location, scope) or raise max_candidates (now %d).",
		list, o.MaxCandidates)
}
