package engine

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// decision is the outcome of the safety checks for one call. do_* acts on it;
// can_do reports it. Both use the same code so a dry run never disagrees with
// the real call.
type decision struct {
	permission promcp.Permission
	reason     string
	details    string
	// clearsAt is when a block may clear by itself (zero: it will not).
	clearsAt time.Time
	// changesAt is the earliest moment an allowed answer may change (a window
	// closing); zero when nothing time-based is pending.
	changesAt time.Time
	// value is what would be written, after a clamping range guard.
	value    any
	clamped  bool
	warnings []string
	// approvedPrevious is the device value a person was shown when approving
	// (nil: no approval, or none could be shown); the write needs it unchanged.
	approvedPrevious any
}

func allow() decision { return decision{permission: promcp.Allowed} }

func deny(p promcp.Permission, format string, args ...any) decision {
	return decision{permission: p, reason: fmt.Sprintf(format, args...)}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// minRole is the least role that may call the tool: the stricter of the
// manifest's requires_permission and the policy default.
func (e *Engine) minRole(c *manifest.Capability) manifest.Role {
	role := c.RequiresPermission
	if role == "" {
		role = manifest.RoleNone
	}
	if def := e.p.DefaultRole(); def.Rank() > role.Rank() {
		role = def
	}
	return role
}

// access checks who may call the tool and when: roles, then time windows.
// Reads and writes share it.
func (e *Engine) access(pt *point, caller Caller) decision {
	d := e.roleAccess(pt, caller.Role)
	if d.permission != promcp.Allowed {
		return d
	}
	var now time.Time // read only for a window: can_do checks every match, and the clock costs
	for _, r := range pt.rules {
		if r.TimeWindow != nil {
			if now.IsZero() {
				now = e.now()
			}
			ok, why, changes := r.TimeWindow.Evaluate(e.p, now)
			if !ok {
				blocked := deny(promcp.PolicyDenied, "%s", why)
				blocked.clearsAt = changes
				return blocked
			}
			d.changesAt = earliest(d.changesAt, changes)
		}
	}
	return d
}

func roleName(r manifest.Role) string {
	if r == "" {
		return string(manifest.RoleNone)
	}
	return string(r)
}

func roleList(rs []manifest.Role) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// rates lists every rate limit on a do tool: the manifest's rate_limit, the
// policy default and the policy's rate rules all apply (docs/policy.md).
func (e *Engine) rates(pt *point) []manifest.Rate {
	var out []manifest.Rate
	if pt.c.RateLimit != nil {
		out = append(out, *pt.c.RateLimit)
	}
	for _, r := range pt.rules {
		if r.Rate != nil && r.Rate.Max != nil {
			out = append(out, *r.Rate.Max)
		}
	}
	if e.p != nil && e.p.Defaults != nil && e.p.Defaults.RateLimit != nil {
		out = append(out, *e.p.Defaults.RateLimit)
	}
	return out
}

// limits checks rate limits and the cooldown against the writes already
// made, and the settle window of an in-doubt write to the same site.
func (e *Engine) limits(pt *point) decision {
	rates, cd := e.rates(pt), pt.c.Cooldown()
	var now time.Time // read only to count writes: can_do checks every match, and the clock costs
	if len(rates) > 0 || cd > 0 {
		now = e.now()
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, rate := range rates {
		since := now.Add(-rate.Per)
		i, _ := slices.BinarySearchFunc(pt.writes, since, func(t, s time.Time) int { return t.Compare(s) })
		// writes[i:] fall inside the window (strictly after since).
		for i < len(pt.writes) && !pt.writes[i].After(since) {
			i++
		}
		recent := pt.writes[i:]
		if len(recent) >= rate.Count {
			d := deny(promcp.RateLimited, "rate limit %s reached: %d writes in the last %s", rate.Text, len(recent), rate.Per)
			d.clearsAt = recent[len(recent)-rate.Count].Add(rate.Per)
			return d
		}
	}
	if cd > 0 && !pt.lastWrite.IsZero() {
		if until := pt.lastWrite.Add(cd); now.Before(until) {
			d := deny(promcp.CooldownActive, "cooldown of %s after the last write is active for another %s", cd, until.Sub(now).Round(time.Millisecond))
			d.clearsAt = until
			return d
		}
	}
	if l, ok := pt.site.pendingLate(func() time.Time {
		if now.IsZero() {
			now = e.now()
		}
		return now
	}); ok {
		// Written now, the value could be undone when the frame lands.
		retry := fmt.Sprintf("a retry of %q settles that write", l.key)
		if l.key == "" {
			retry = "that write has no idempotency_key to retry: its window ends it, or the device's late reply when the bus hears one"
		}
		d := deny(promcp.CooldownActive, "%s to this register or line has no known outcome, "+
			"and the device may still apply it until %s (%s); nothing is written to it before then. "+
			"Retry after that; %s",
			l.what(), promcp.Time(l.until), l.why, retry)
		d.clearsAt = l.until
		return d
	}
	return allow()
}

// guardRange applies the policy's range guards to a numeric value.
func (e *Engine) guardRange(pt *point, d *decision) {
	f, ok := drivers.AsFloat(d.value)
	if !ok {
		return
	}
	for _, r := range pt.rules {
		g := r.RangeGuard
		if g == nil {
			continue
		}
		lo, hi := math.Inf(-1), math.Inf(1)
		if g.Min != nil {
			lo = *g.Min
		}
		if g.Max != nil {
			hi = *g.Max
		}
		if f >= lo && f <= hi {
			continue
		}
		bounds := fmt.Sprintf("[%s, %s]%s", fmtBound(g.Min, "-inf"), fmtBound(g.Max, "+inf"), unitSuffix(pt.c))
		switch g.OnViolation {
		case policy.ViolationDeny:
			*d = deny(promcp.OutOfRange, "value %v is outside the policy's range guard %s", d.value, bounds)
			return
		case policy.ViolationClamp:
			clamped := math.Min(math.Max(f, lo), hi)
			d.warnings = append(d.warnings, fmt.Sprintf("value %v clamped to %v by the policy's range guard %s", d.value, clamped, bounds))
			d.value = sameKind(d.value, clamped)
			d.clamped = true
			f = clamped
		case policy.ViolationWarn:
			d.warnings = append(d.warnings, fmt.Sprintf("value %v is outside the policy's range guard %s (written anyway: on_violation warn)", d.value, bounds))
		}
	}
}

// writeBounds is what a write may never pass: the manifest range narrowed by
// the range guards that deny or clamp (a warn guard bounds nothing).
func (e *Engine) writeBounds(pt *point) (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	narrow := func(min, max *float64) {
		if min != nil {
			lo = math.Max(lo, *min)
		}
		if max != nil {
			hi = math.Min(hi, *max)
		}
	}
	if r := pt.c.Range; r != nil {
		narrow(r.Min, r.Max)
	}
	for _, r := range pt.rules {
		if g := r.RangeGuard; g != nil && g.OnViolation != policy.ViolationWarn {
			narrow(g.Min, g.Max)
		}
	}
	return lo, hi
}

// quantise replaces d.value by what the device will hold once it is written
// (the encoding rounds to its step: scale 10 writes 15 as 20) and checks the
// bounds on that, not on the request. When rounding would cross a bound the
// request is inside, the nearest value the device can hold inside the bounds
// is written instead and the answer is partial; when there is none, nothing is.
func (e *Engine) quantise(pt *point, d *decision) {
	want, numeric := drivers.AsFloat(d.value)
	if !numeric {
		return
	}
	q, err := pt.quantise(d.value)
	if err != nil {
		*d = deny(promcp.OutOfRange, "value %v cannot be written to this binding: %v", d.value, err)
		return
	}
	lo, hi := e.writeBounds(pt)
	got, _ := drivers.AsFloat(q)
	if got < lo || got > hi {
		inside, ok := e.nearestInside(pt, q, lo, hi, got > hi)
		if !ok {
			*d = deny(promcp.OutOfRange, "value %v would be written as %v, outside [%v, %v]%s, and the binding holds no value inside it",
				d.value, q, lo, hi, unitSuffix(pt.c))
			return
		}
		d.warnings = append(d.warnings, fmt.Sprintf("value %v cannot be held exactly (it would be written as %v, outside [%v, %v]%s); %v, the nearest value inside, is written instead",
			d.value, q, lo, hi, unitSuffix(pt.c), inside))
		d.value, d.clamped = inside, true
		return
	}
	if got != want {
		d.warnings = append(d.warnings, fmt.Sprintf("value %v is written as %v, the nearest value the register holds", d.value, q))
	}
	d.value = q
}

// quantise is pt.drv.Quantise, remembering the latest answer.
func (pt *point) quantise(v any) (any, error) {
	pt.mu.Lock()
	memo := pt.quantised
	pt.mu.Unlock()
	if memo.in == v && v != nil {
		return memo.out, nil
	}
	q, err := pt.drv.Quantise(v)
	if err == nil {
		pt.mu.Lock()
		pt.quantised.in, pt.quantised.out = v, q
		pt.mu.Unlock()
	}
	return q, err
}

// nearestInside is the greatest (below set) or least value the binding holds
// within lo..hi, as the codec will write it.
func (e *Engine) nearestInside(pt *point, like any, lo, hi float64, below bool) (any, bool) {
	enc, ok := pt.encoding()
	if !ok {
		return nil, false
	}
	least, greatest, ok := enc.Within(lo, hi)
	if !ok {
		return nil, false
	}
	pick := least
	if below {
		pick = greatest
	}
	v, err := pt.drv.Quantise(sameKind(like, pick))
	f, _ := drivers.AsFloat(v)
	return v, err == nil && f >= lo && f <= hi
}

func fmtBound(b *float64, none string) string {
	if b == nil {
		return none
	}
	return fmt.Sprint(*b)
}

func (e *Engine) needsApproval(pt *point) bool {
	for _, r := range pt.rules {
		if r.Approval != nil {
			return true
		}
	}
	return false
}

// evaluate runs every policy check for writing value (already validated
// against the manifest) to a do point, in the order the contract gives:
// role, time window, rate, cooldown, range guard, quorum, approval.
func (e *Engine) evaluate(pt *point, caller Caller, value any) decision {
	d := e.access(pt, caller)
	if d.permission != promcp.Allowed {
		return d
	}
	if l := e.limits(pt); l.permission != promcp.Allowed {
		return l
	}
	d.value = value
	if value != nil {
		e.guardRange(pt, &d)
		if d.permission != promcp.Allowed {
			return d
		}
		e.quantise(pt, &d)
		if d.permission != promcp.Allowed {
			return d
		}
	}
	e.quorumCheck(pt, &d)
	if d.permission != promcp.Allowed {
		return d
	}
	if e.needsApproval(pt) {
		d.permission = promcp.RequiresHumanApproval
		d.reason = fmt.Sprintf("the policy requires a person to approve each call of %s", pt.tool)
	}
	return d
}

// validate checks a requested value against the manifest: its type and the
// hard range that is never written past. It returns the value in the engine's
// canonical type (float64, int64, bool or string).
func validate(c *manifest.Capability, v any) (any, promcp.Permission, error) {
	if v == nil {
		return nil, "", fmt.Errorf("value is required")
	}
	switch c.DataType {
	case manifest.TypeFloat, manifest.TypeInt:
		f, ok := drivers.AsFloat(v)
		if !ok {
			return nil, "", fmt.Errorf("value must be a number, got %s", describeJSON(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, promcp.OutOfRange, fmt.Errorf("value must be a finite number")
		}
		if c.Range != nil && (c.Range.Min != nil && f < *c.Range.Min || c.Range.Max != nil && f > *c.Range.Max) {
			return nil, promcp.OutOfRange, fmt.Errorf("value %v is outside the range %s", v, rangeText(c))
		}
		if c.DataType == manifest.TypeInt {
			if f != math.Trunc(f) {
				return nil, "", fmt.Errorf("value must be a whole number, got %v", v)
			}
			return int64(f), promcp.Allowed, nil
		}
		if _, ok := v.(float64); ok {
			return v, promcp.Allowed, nil // already canonical: not boxed again for each of can_do's matches
		}
		return f, promcp.Allowed, nil
	case manifest.TypeBool:
		b, ok := v.(bool)
		if !ok {
			return nil, "", fmt.Errorf("value must be true or false, got %s", describeJSON(v))
		}
		return b, promcp.Allowed, nil
	case manifest.TypeEnum:
		s, ok := v.(string)
		if !ok || !slices.Contains(c.EnumValues, s) {
			return nil, promcp.OutOfRange, fmt.Errorf("value must be one of %s, got %s", strings.Join(c.EnumValues, ", "), describeJSON(v))
		}
		return s, promcp.Allowed, nil
	case manifest.TypeString:
		s, ok := v.(string)
		if !ok {
			return nil, "", fmt.Errorf("value must be a string, got %s", describeJSON(v))
		}
		return s, promcp.Allowed, nil
	}
	return nil, "", fmt.Errorf("capability has unsupported data_type %q", c.DataType)
}

// sameKind converts f to the type of like (int64 stays int64).
func sameKind(like any, f float64) any {
	if _, ok := like.(int64); ok {
		return int64(math.Round(f))
	}
	return f
}

func describeJSON(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%v", v)
}
