package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Confidence formula (documented in docs/engine.md, "can_do"). For each capability:
//
//	s_tags   = |I ∩ V| / |I|  where I is the intent's tags and V the
//	           capability's semantic_tags plus the words of its name
//	s_action = 1 when the action fits the capability (read → read_*; set and
//	           update → any do_*; toggle → boolean do_*; increase and decrease →
//	           numeric do_*; create and delete fit nothing physical), else the
//	           capability is not a match at all
//	s_target = 1 when the target is the capability or tool name, else the share
//	           of the target's words found in the name
//	s_loc    = 1 when the location names the device's zone, area or
//	           description (or a word of them)
//
//	base       = (0.5·s_tags + 0.2·s_action + 0.2·s_target + 0.1·s_loc) / W
//	confidence = base · f_target · f_loc
//
// where W sums the weights of the parts the intent gives (tags always; action,
// target and location only when present); f_target = 0.5 + 0.5·s_target when
// a target is given (a target naming something else halves the confidence,
// below the 0.7 at which a caller acts without asking), else 1; f_loc = 0.6
// when a location is given and the device declares none (it cannot be
// confirmed), else 1. A location the device declares and does not match rules
// the whole device out: the report is unroutable (no_producer). A capability
// matches when s_tags > 0 or s_target > 0 and the action fits.
const (
	weightTags     = 0.5
	weightAction   = 0.2
	weightTarget   = 0.2
	weightLocation = 0.1
	// unknownLocation is f_loc for a device that declares no location.
	unknownLocation = 0.6
)

// Validity horizons for can_do answers (proMCP valid_until guidance).
const (
	staticValidity   = 60 * time.Second // nothing but roles and windows can change the answer
	limitedValidity  = 15 * time.Second // rate limits or cooldowns apply
	criticalValidity = time.Second      // irreversible actions
)

// match is how well a capability matches an intent: its confidence, and the
// parts it came from, from which reasons writes the match_reasons of the
// entries the report keeps.
type match struct {
	confidence float64
	hits       int     // the intent's tags the capability has
	sTarget    float64 // share of the target the name matches
}

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// actionFits reports whether an intent action can be served by the capability.
func actionFits(action string, c *manifest.Capability) bool {
	switch action {
	case "":
		return true
	case "read":
		return c.Kind == manifest.KindRead
	case "set", "update":
		return c.Kind == manifest.KindDo
	case "toggle":
		return c.Kind == manifest.KindDo && c.DataType == manifest.TypeBool
	case "increase", "decrease":
		return c.Kind == manifest.KindDo && c.IsNumeric()
	}
	return false
}

// query is a can_do intent normalised once for matching every capability.
type query struct {
	promcp.Intent
	tags        []string // lower case, trimmed
	target      string   // lower case, trimmed
	targetWords []string
}

func newQuery(in promcp.Intent) query {
	q := query{Intent: in, target: strings.ToLower(strings.TrimSpace(in.Target))}
	q.Action = strings.ToLower(strings.TrimSpace(in.Action))
	for _, t := range in.SemanticTags {
		q.tags = append(q.tags, strings.ToLower(strings.TrimSpace(t)))
	}
	q.targetWords = words(q.target)
	return q
}

func (e *Engine) match(pt *point, in query) (match, bool) {
	c := pt.c
	if !actionFits(in.Action, c) {
		return match{}, false
	}
	var m match
	for _, t := range in.tags {
		if pt.vocab[t] {
			m.hits++
		}
	}
	sTags := float64(m.hits) / float64(len(in.SemanticTags))
	score, weight := weightTags*sTags, weightTags
	if in.Action != "" {
		score += weightAction
		weight += weightAction
	}
	if in.Target != "" {
		if in.target == c.Name || in.target == pt.tool {
			m.sTarget = 1
		} else if tw := in.targetWords; len(tw) > 0 {
			found := 0
			for _, w := range tw {
				if slices.Contains(pt.nameWords, w) {
					found++
				}
			}
			m.sTarget = float64(found) / float64(len(tw))
		}
		score += weightTarget * m.sTarget
		weight += weightTarget
	}
	if sTags == 0 && m.sTarget == 0 {
		return match{}, false
	}
	factor := 1.0
	if in.Target != "" {
		factor *= 0.5 + 0.5*m.sTarget
	}
	if in.Location != "" {
		weight += weightLocation
		if e.m.Device.Location == nil {
			factor *= unknownLocation
		} else {
			// CanDo has ruled out a device elsewhere.
			score += weightLocation
		}
	}
	m.confidence = math.Round(score/weight*factor*100) / 100
	return m, true
}

// reasons are the match_reasons of pt for in, as PhysMCP names them
// (tag_overlap, location_match, ...), each with what it rests on:
// "tag_overlap 1/2", "action_fits set", "target_match setpoint_042",
// "target_partial setpoint_042 1/2", "target_mismatch setpoint_042",
// "location_match lab", "location_unconfirmed lab" (the device declares no
// location).
func (e *Engine) reasons(pt *point, in query, m match) []string {
	r := make([]string, 0, 4)
	if m.hits > 0 {
		r = append(r, "tag_overlap "+strconv.Itoa(m.hits)+"/"+strconv.Itoa(len(in.SemanticTags)))
	}
	if in.Action != "" {
		r = append(r, "action_fits "+in.Action)
	}
	if in.Target != "" {
		switch n := len(in.targetWords); {
		case m.sTarget == 1:
			r = append(r, "target_match "+in.Target)
		case m.sTarget > 0:
			r = append(r, "target_partial "+in.Target+" "+strconv.Itoa(int(math.Round(m.sTarget*float64(n))))+"/"+strconv.Itoa(n))
		default:
			r = append(r, "target_mismatch "+in.Target)
		}
	}
	if in.Location != "" {
		if e.m.Device.Location == nil {
			r = append(r, "location_unconfirmed "+in.Location)
		} else {
			r = append(r, "location_match "+in.Location)
		}
	}
	return r
}

// elsewhere says why the device cannot serve an intent for another location
// ("" when it can, or declares no location).
func (e *Engine) elsewhere(loc string) string {
	l := e.m.Device.Location
	if loc == "" || l == nil || e.locationMatches(loc) {
		return ""
	}
	where := strings.Join(slices.DeleteFunc([]string{l.Zone, l.Area, l.Description}, func(s string) bool { return s == "" }), ", ")
	return fmt.Sprintf("%s is in %s, not in location %q", e.deviceID(), where, loc)
}

func (e *Engine) locationMatches(loc string) bool {
	l := e.m.Device.Location
	want := strings.ToLower(strings.TrimSpace(loc))
	for _, field := range []string{l.Zone, l.Area, l.Description} {
		f := strings.ToLower(field)
		if f == "" {
			continue
		}
		if f == want || strings.Contains(f, want) || slices.Contains(words(f), want) {
			return true
		}
	}
	return false
}

func (e *Engine) inScope(pt *point, scope []string) bool {
	if len(scope) == 0 {
		return true
	}
	for _, s := range scope {
		if s == pt.c.Name || s == pt.tool || s == e.deviceID() {
			return true
		}
	}
	return false
}

// CanDo answers can_do: which capabilities could serve the intent and
// whether each would be allowed now, running the same checks as do_*
// without acting. It never writes.
func (e *Engine) CanDo(ctx context.Context, caller Caller, req promcp.CanDoRequest) (promcp.CapabilityReport, error) {
	start := time.Now()
	ctx = context.WithValue(ctx, assessBudgetKey{}, start.Add(AssessBudget))
	asks := &consulted{sources: map[string]asked{}}
	ctx = context.WithValue(ctx, consultedKey{}, asks)
	now := e.now()
	rep := promcp.CapabilityReport{
		QueryID:    promcp.NewUUID(),
		Candidates: []promcp.Candidate{},
		Blocked:    []promcp.Blocked{},
		Unroutable: []promcp.Unroutable{},
		Context:    promcp.ReportContext{RelatedReads: []string{}, CurrentObservations: map[string]any{}},
	}
	in := newQuery(req.Intent)
	if problem := malformed(in.Intent); problem != "" {
		rep.Unroutable = append(rep.Unroutable, promcp.Unroutable{Outcome: promcp.OutcomeUnroutable, Reason: promcp.MalformedRequest, Detail: problem})
		return e.sealReport(rep, start), nil
	}
	if why := e.elsewhere(in.Location); why != "" {
		rep.Unroutable = append(rep.Unroutable, promcp.Unroutable{Outcome: promcp.OutcomeUnroutable, Reason: promcp.NoProducer, Detail: why})
		return e.sealReport(rep, start), nil
	}

	s := scratchPool.Get().(*canDoScratch)
	defer s.release()
	hits := e.pointMatches(s.hits, in, req.Scope)
	e.dryRuns(ctx, caller, in.Intent, hits)
	hits = append(hits, e.unservedMatches(in, req.Scope)...)
	hits = append(hits, e.operationMatches(ctx, caller, in, req.Scope)...)
	s.hits = hits
	// Candidates and blocked entries are built only for the matches the
	// report keeps: the cap is what bounds the answer.
	cands, blocked, rc, rb := s.cands, s.blocked, s.rc, s.rb
	for i := range hits {
		h := &hits[i]
		r := promcp.Ranked{Confidence: h.m.confidence, Permission: h.d.permission}
		if h.d.permission == promcp.Allowed || h.d.permission == promcp.RequiresHumanApproval {
			cands, rc = append(cands, h), append(rc, r)
		} else {
			blocked, rb = append(blocked, h), append(rb, r)
		}
	}
	s.cands, s.blocked, s.rc, s.rb = cands, blocked, rc, rb
	keepC, keepB, omitted := promcp.Cap(req.Limit(), rc, rb)
	rep.Candidates = make([]promcp.Candidate, 0, len(keepC))
	for _, i := range keepC {
		rep.Candidates = append(rep.Candidates, e.hitCandidate(ctx, in, cands[i], now))
	}
	rep.Blocked = make([]promcp.Blocked, 0, len(keepB))
	for _, i := range keepB {
		rep.Blocked = append(rep.Blocked, e.hitBlocked(in, blocked[i]))
	}
	rep.Metadata.Omitted = omitted
	if len(cands) == 0 && len(blocked) == 0 {
		rep.Unroutable = append(rep.Unroutable, promcp.Unroutable{
			Outcome: promcp.OutcomeUnroutable,
			Reason:  promcp.NoProducer,
			Detail:  fmt.Sprintf("no capability of %s matches tags [%s]%s", e.deviceID(), strings.Join(in.SemanticTags, ", "), actionPhrase(in.Action)),
		})
	}
	e.relatedReads(&rep, in.Intent)
	rep = e.sealReport(rep, start)
	rep.Metadata.MeshMetadata = asks.metadata(e)
	return rep, nil
}

// canDoScratch is one can_do's lists of matches, kept for the next call:
// at 200 capabilities they were half of what a call allocated.
type canDoScratch struct {
	hits           []hit
	cands, blocked []*hit
	rc, rb         []promcp.Ranked
}

var scratchPool = sync.Pool{New: func() any { return new(canDoScratch) }}

// release empties s, so that it holds on to no point or value, and returns
// it to the pool.
func (s *canDoScratch) release() {
	clear(s.hits)
	clear(s.cands)
	clear(s.blocked)
	s.hits, s.cands, s.blocked, s.rc, s.rb = s.hits[:0], s.cands[:0], s.blocked[:0], s.rc[:0], s.rb[:0]
	scratchPool.Put(s)
}

func actionPhrase(action string) string {
	if action == "" {
		return ""
	}
	return " for action " + action
}

func malformed(in promcp.Intent) string {
	if len(in.SemanticTags) == 0 {
		return "intent.semantic_tags must list at least one tag"
	}
	for _, t := range in.SemanticTags {
		if strings.TrimSpace(t) == "" {
			return "intent.semantic_tags must not contain empty tags"
		}
	}
	if in.Action != "" && !slices.Contains(promcp.Actions, in.Action) {
		return fmt.Sprintf("intent.action %q is not one of %s", in.Action, strings.Join(promcp.Actions, ", "))
	}
	return ""
}

// dryRun is do_*'s checks without the write, plus reachability of the source.
func (e *Engine) dryRun(ctx context.Context, pt *point, caller Caller, in promcp.Intent) decision {
	var d decision
	if pt.c.Kind == manifest.KindRead {
		d = e.access(pt, caller)
	} else {
		var value any
		if in.Value != nil && (in.Action == "set" || in.Action == "update" || in.Action == "") {
			v, perm, err := validate(pt.c, in.Value)
			if err != nil {
				if perm == "" {
					perm = promcp.PolicyDenied
				}
				return deny(perm, "%v", err)
			}
			value = v
		}
		d = e.evaluate(pt, caller, value)
	}
	if d.permission != promcp.Allowed && d.permission != promcp.RequiresHumanApproval {
		return d
	}
	// What is known of the device without asking it says more than its
	// breaker: why it is away (the mesh lists it dead).
	if l, ok := pt.drv.(drivers.Liveness); ok {
		if err := l.Offline(); err != nil {
			return deny(promcp.SourceUnreachable, "%v", err)
		}
	}
	if clearsAt, err := e.breakerBlocks(pt); err != nil {
		blocked := deny(promcp.SourceUnreachable, "the device does not answer: %v", err)
		blocked.clearsAt = clearsAt
		return blocked
	}
	if pt.c.Kind == manifest.KindDo {
		if il := e.interlocks(ctx, pt, d.value, false); il.permission != promcp.Allowed {
			return il
		}
		if a, ok := pt.drv.(drivers.Assessor); ok {
			if sd := e.assess(ctx, pt, a, d.value); sd.permission != promcp.Allowed {
				return sd
			}
		}
	}
	pt.mu.Lock()
	unknown := pt.last == nil || pt.lastErr != nil
	pt.mu.Unlock()
	if unknown || sourceOut(pt) {
		// Nothing is known yet, the latest attempt failed or the source is
		// known to be gone: ask the device before promising anything.
		if err := e.probe(ctx, pt); err != nil {
			if perm := failurePermission(err); perm == promcp.DeviceRejected {
				return deny(perm, "the device refuses to read %s: %v", pt.tool, err)
			}
			return deny(promcp.SourceUnreachable, "the device does not answer: %v", err)
		}
	}
	if refused, ok := pt.refusedBefore(d.value); ok {
		return refused
	}
	return d
}

// AssessTimeout and AssessBudget bound how long can_do waits for the
// devices that judge actions themselves (adopted sources): each one, and
// all of them together.
const (
	AssessTimeout = 150 * time.Millisecond
	AssessBudget  = 500 * time.Millisecond
)

type assessBudgetKey struct{}

// assessDeadline is when can_do stops waiting for an adopted source asked
// now. A device that hangs must not hold can_do up: each is asked for at
// most AssessTimeout, and all of one can_do together for AssessBudget
// (PhysMCP's per-hop and total deadlines), as the mesh asks its peers.
func assessDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(AssessTimeout)
	if total, ok := ctx.Value(assessBudgetKey{}).(time.Time); ok && total.Before(deadline) {
		deadline = total
	}
	return deadline
}

// probe reads pt for can_do's dry run. A local device is waited for as a
// read would be; an adopted source no longer than its judgement would be
// (assessDeadline), so that one hung device does not hold can_do past its
// budget: the read goes on detached and its outcome is kept for the next.
func (e *Engine) probe(ctx context.Context, pt *point) error {
	if pt.adopted == nil {
		_, err := e.sample(ctx, pt)
		return err
	}
	deadline := assessDeadline(ctx)
	wait := time.Until(deadline)
	done := make(chan error, 1)
	go func() {
		_, err := e.sample(context.WithoutCancel(ctx), pt)
		done <- err
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-done:
		switch {
		case err == nil:
			noteAsked(ctx, pt.adopted.SourceAddress, askAnswered)
		case errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrDeviceBusy): // not asked
		default:
			noteAsked(ctx, pt.adopted.SourceAddress, askFailed)
		}
		return err
	case <-timer.C:
		noteAsked(ctx, pt.adopted.SourceAddress, askLate)
		return fmt.Errorf("no answer within can_do's %v for a device: %w", wait.Round(time.Millisecond), drivers.ErrTimeout)
	}
}

// assess asks a device that judges actions itself (an adopted source):
// after this device's own checks, the source's checks apply too, so a
// candidate is allowed only when both would let the call through. The
// question goes on detached past can_do's deadline, as probe's read does,
// and a can_do that asks the same meanwhile waits for it (ask): an answer
// that comes late is kept and stands for the next can_do that gets none in
// time (LateAnswerTTL).
func (e *Engine) assess(ctx context.Context, pt *point, a drivers.Assessor, value any) decision {
	deadline := assessDeadline(ctx)
	wait := time.Until(deadline)
	var none string // why no answer stands now
	if q := e.ask(ctx, pt, a, value, deadline); q == nil {
		none = fmt.Sprintf("%d questions to it are unanswered, none asked now", MaxQuestions)
	} else {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-q.done:
			ans := q.ans
			if ans.reached && pt.adopted != nil {
				if ans.err == nil {
					noteAsked(ctx, pt.adopted.SourceAddress, askAnswered)
				} else {
					noteAsked(ctx, pt.adopted.SourceAddress, askFailed)
				}
			}
			if ans.err != nil {
				return deny(promcp.SourceUnreachable, "the device does not answer: %v", ans.err)
			}
			return judged(ans.perm, ans.reason, "")
		case <-timer.C:
			if pt.adopted != nil {
				noteAsked(ctx, pt.adopted.SourceAddress, askLate)
			}
			none = fmt.Sprintf("no answer within can_do's %v", wait.Round(time.Millisecond))
		}
	}
	if v, ok := pt.lateVerdict(value, e.now()); ok {
		return judged(v.perm, v.reason, fmt.Sprintf(" (its answer of %v ago: %s now)", e.now().Sub(v.at).Round(time.Millisecond), none))
	}
	return deny(promcp.SourceUnreachable, "the device does not answer: %s: %v", none, drivers.ErrTimeout)
}

// judged is the decision a source's answer to can_do makes; late says when
// the answer is an earlier one.
func judged(perm, reason, late string) decision {
	if perm == "" || perm == string(promcp.Allowed) {
		return decision{permission: promcp.Allowed}
	}
	return deny(promcp.Permission(perm), "the device itself answers %s: %s%s", perm, reason, late)
}

func (e *Engine) candidate(ctx context.Context, pt *point, m match, reasons []string, d decision, now time.Time) promcp.Candidate {
	c := pt.c
	cand := promcp.Candidate{
		Capability:   pt.tool,
		Source:       e.deviceID(),
		Confidence:   m.confidence,
		Permission:   d.permission,
		CurrentState: e.currentState(ctx, pt),
		Constraints: promcp.Constraints{
			Unit:       unitOf(c),
			EnumValues: c.EnumValues,
			CooldownMs: c.CooldownMs,
		},
		SideEffects:  sideEffects(c),
		DeviceID:     e.deviceID(),
		MatchReasons: reasons,
		AdoptedFrom:  pt.adopted,
	}
	if cand.Constraints.EnumValues == nil {
		cand.Constraints.EnumValues = []string{}
	}
	if c.Range != nil {
		cand.Constraints.Min, cand.Constraints.Max = e.effectiveRange(pt)
	}
	if c.Kind == manifest.KindDo {
		var rates []string
		for _, r := range e.rates(pt) {
			rates = append(rates, r.Text)
		}
		cand.Constraints.RateLimit = strings.Join(rates, ", ")
		cand.Constraints.MinRole, cand.Constraints.Roles = roleConstraint(func(r manifest.Role) bool {
			return e.roleAccess(pt, r).permission == promcp.Allowed
		})
		cand.Constraints.Quorum = e.quorumConstraint(pt)
	}
	cand.ValidUntil = promcp.Time(e.validUntil(pt, d, now))
	est := pt.estimatedLatency()
	if c.Kind == manifest.KindDo {
		est *= 3 // read the previous value, write, read back
	} else if e.cached(pt) != nil {
		est = 0
	}
	// proMCP's reference schema has whole milliseconds; an estimate rounds up.
	cand.EstimatedLatencyMs = int64(math.Ceil(float64(est) / float64(time.Millisecond)))
	return cand
}

// effectiveRange is the manifest range narrowed by deny guards: what a caller
// can actually write without being refused.
func (e *Engine) effectiveRange(pt *point) (lo, hi *float64) {
	lo, hi = pt.c.Range.Min, pt.c.Range.Max
	if pt.c.Kind != manifest.KindDo {
		return lo, hi
	}
	for _, r := range pt.rules {
		if g := r.RangeGuard; g != nil && g.OnViolation != "warn" {
			if g.Min != nil && (lo == nil || *g.Min > *lo) {
				lo = g.Min
			}
			if g.Max != nil && (hi == nil || *g.Max < *hi) {
				hi = g.Max
			}
		}
	}
	return lo, hi
}

// validUntil follows proMCP's guidance and is never later than the moment a
// window would change the answer.
func (e *Engine) validUntil(pt *point, d decision, now time.Time) time.Time {
	horizon := staticValidity
	if pt.c.Kind == manifest.KindDo {
		if len(e.rates(pt)) > 0 || pt.c.CooldownMs > 0 {
			horizon = limitedValidity
		}
		if pt.c.Compensable != nil && !*pt.c.Compensable {
			horizon = criticalValidity
		}
		if len(pt.c.Interlocks) > 0 {
			horizon = min(horizon, interlockValidity)
		}
	}
	until := now.Add(horizon)
	if !d.changesAt.IsZero() && d.changesAt.Before(until) {
		until = d.changesAt
	}
	return until
}

// currentState is the point's last known value; it reads the device only when
// nothing is known yet.
func (e *Engine) currentState(ctx context.Context, pt *point) promcp.CurrentState {
	st := promcp.CurrentState{Unit: unitOf(pt.c)}
	pt.mu.Lock()
	r := pt.last
	pt.mu.Unlock()
	if r == nil {
		r, _ = e.sample(ctx, pt)
	}
	if r != nil {
		st.Value, st.Timestamp = r.value, r.stamp
	} else {
		st.Timestamp = promcp.Time(e.now())
	}
	return st
}

// sealReport completes the report and counts the call.
func (e *Engine) sealReport(rep promcp.CapabilityReport, start time.Time) promcp.CapabilityReport {
	took := time.Since(start)
	e.canDoCounts.calls.Add(1)
	e.callLatency[verbCanDo].observe(took)
	promcp.DeriveFeasible(&rep)
	rep.Metadata = promcp.ReportMetadata{
		Timestamp:      promcp.Time(e.now()),
		TotalLatencyMs: took.Round(time.Millisecond).Milliseconds(),
		DeviceID:       e.deviceID(),
		PromcpBase:     promcp.BaseVersion,
		Omitted:        rep.Metadata.Omitted,
	}
	return rep
}
