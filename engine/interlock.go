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
// asked for the guarded value). fresh reads each source from the device, as
// do_* does right before writing; otherwise a reading still within its cache
// TTL serves (can_do). A source that cannot be read, or reads an implausible
// value, refuses: nothing acts on unknown state.
func (e *Engine) interlocks(ctx context.Context, pt *point, value any, fresh bool) decision {
	for _, il := range pt.c.Interlocks {
		if value != nil && !il.Applies(value) {
			continue
		}
		src := e.points[il.Source.ToolName()]
		var r *reading
		var err error
		if fresh {
			r, err = e.readFresh(ctx, src)
		} else if r = e.cached(src); r == nil {
			r, err = e.sample(ctx, src)
		}
		if err != nil {
			return deny(promcp.SourceUnreachable, "interlock %s cannot be checked, so %s may not act: %v", condition(il), pt.tool, err)
		}
		if r.flag != "" {
			return deny(promcp.PolicyDenied, "interlock %s cannot be checked, so %s may not act: %s is implausible (%s)", condition(il), pt.tool, src.tool, r.flag)
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
