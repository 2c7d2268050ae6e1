package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// interlockValidity bounds a can_do answer for a capability with interlocks:
// it rests on physical state (a tank level) that can change at any moment.
const interlockValidity = 2 * time.Second

// interlocks checks every interlock that governs writing value to pt (all of
// them when value is nil: a can_do intent without a value is checked as if it
// asked for the guarded value), on readings as conditionReading takes them.
func (e *Engine) interlocks(ctx context.Context, pt *point, value any, fresh bool) decision {
	for _, il := range pt.c.Interlocks {
		if value != nil && !il.Applies(value) {
			continue
		}
		src := e.catalog().points[il.Source.ToolName()]
		r, perm, why := e.conditionReading(ctx, src, fresh)
		if r == nil {
			return deny(perm, "interlock %s cannot be checked, so %s may not act: %s", condition(il), pt.tool, why)
		}
		if !holds(r.value, il.Op, il.Value) {
			reason := il.Reason
			if reason == "" {
				reason = "interlock"
			}
			guarded := pt.tool
			if il.When != nil {
				guarded = fmt.Sprintf("%s %v", pt.tool, il.When)
			}
			return deny(promcp.PolicyDenied, "%s: %s needs %s, and %s is %v%s", reason, guarded, condition(il), src.tool, r.value, unitSuffix(src.c))
		}
	}
	return allow()
}

// conditionReading reads the source of a condition (an interlock, a quorum
// check): fresh from the device, as do_* does right before writing, or else
// a reading still within its cache TTL (can_do). Nothing acts on unknown
// state: a reading that cannot be taken (source_unreachable), or that is
// implausible or an adopted source's stale last good value (policy_denied),
// is not returned, and why says what is wrong with it.
func (e *Engine) conditionReading(ctx context.Context, src *point, fresh bool) (r *reading, perm promcp.Permission, why string) {
	var err error
	if fresh {
		r, err = e.readFresh(ctx, src)
	} else if r = e.cached(src); r == nil {
		r, err = e.sample(ctx, src)
	}
	switch {
	case err != nil:
		return nil, promcp.SourceUnreachable, err.Error()
	case r.flag != "":
		return nil, promcp.PolicyDenied, fmt.Sprintf("%s is implausible (%s)", src.tool, r.flag)
	case r.stale != "":
		return nil, promcp.PolicyDenied, fmt.Sprintf("%s is stale (%s)", src.tool, r.stale)
	}
	return r, promcp.Allowed, ""
}

// condition renders an interlock as "read_tank_level > 10 %".
func condition(il *manifest.Interlock) string {
	return fmt.Sprintf("%s %s %v%s", il.Source.ToolName(), il.Op, il.Value, unitSuffix(il.Source))
}

// holds compares a reading with an interlock's value. Numbers compare by
// value whatever their Go type; other values only by == and !=. A reading of
// another type than validation allowed never holds.
func holds(reading any, op string, want any) bool {
	g, gok := drivers.AsFloat(reading)
	w, wok := drivers.AsFloat(want)
	if gok && wok {
		switch op {
		case "<":
			return g < w
		case "<=":
			return g <= w
		case ">":
			return g > w
		case ">=":
			return g >= w
		case "==":
			return g == w
		case "!=":
			return g != w
		}
		return false
	}
	if gok != wok {
		return false
	}
	switch op {
	case "==":
		return manifest.SameValue(reading, want)
	case "!=":
		return !manifest.SameValue(reading, want)
	}
	return false
}
