package manifest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// Interlock is a condition on another capability's reading that must hold for
// a do capability to act: "pump_run only while tank_level < 90". The engine
// checks it in can_do and again, on a fresh read, right before every write.
type Interlock struct {
	// Capability names the read capability whose reading is compared, by
	// capability name (tank_level) or tool name (read_tank_level).
	Capability string `yaml:"capability,required"`
	// Op is one of <, <=, >, >=, ==, != (only == and != for bool, enum and
	// string readings).
	Op string `yaml:"op,required"`
	// Value is what the reading is compared with, of the reading's type.
	Value any `yaml:"value,required"`
	// When, if set, limits the interlock to writes of this value (a pump may
	// always be switched off: when: true guards only switching it on).
	When any `yaml:"when"`
	// Reason is told to the caller when the interlock blocks an action.
	Reason string `yaml:"reason"`

	// Source is the read capability Capability resolves to (set by validation).
	Source *Capability `yaml:"-"`

	At Positions `yaml:"-"`
}

// InterlockOps are the comparisons an interlock may use, in documentation order.
var InterlockOps = []string{"<", "<=", ">", ">=", "==", "!="}

// Applies reports whether the interlock governs writing v: always without
// when, else only when v is the when value (numbers compare by value).
func (il *Interlock) Applies(v any) bool {
	if il.When == nil {
		return true
	}
	return SameValue(il.When, v)
}

// SameValue compares two capability values; numbers of any Go type compare
// by value (YAML gives int, JSON float64, codecs int64).
func SameValue(a, b any) bool {
	fa, aok := number(a)
	fb, bok := number(b)
	if aok || bok {
		return aok && bok && fa == fb
	}
	return a == b
}

// interlocks checks a capability's interlocks once every capability is known.
func (v *validator) interlocks(path string, c *Capability) {
	if len(c.Interlocks) == 0 {
		return
	}
	if c.Kind == KindRead {
		v.errorf(c.At.Of("interlocks"), path+".interlocks", "only applies to do capabilities")
		return
	}
	for i, il := range c.Interlocks {
		ip := fmt.Sprintf("%s.interlocks[%d]", path, i)
		v.condition(ip, il)
		if il.When != nil && c.Kind == KindDo && c.DataType != "" {
			if msg := c.checkValue(il.When); msg != "" {
				v.errorf(il.At.Of("when"), ip+".when", "%s (when is a value of %s)", msg, c.ToolName())
			}
		}
	}
}

// CheckCondition resolves a condition on one of m's readings that another
// file states as an interlock does (a policy's quorum_checks): Source is set
// when the read capability exists, and whatever is wrong is reported to d,
// as for an interlock.
func (m *Manifest) CheckCondition(d *strictyaml.Decoder, path string, il *Interlock) {
	(&validator{d: d, m: m}).condition(path, il)
}

// condition resolves an interlock's source and checks its comparison and reason.
func (v *validator) condition(ip string, il *Interlock) {
	il.Source = v.interlockSource(ip, il)
	v.interlockCompare(ip, il)
	if il.At.Has("reason") && strings.TrimSpace(il.Reason) == "" {
		v.errorf(il.At.Of("reason"), ip+".reason", "must not be empty; it is what a refused caller is told")
	}
}

// interlockSource resolves the referenced read capability, or reports why it cannot.
func (v *validator) interlockSource(ip string, il *Interlock) *Capability {
	ref := il.Capability
	if ref == "" {
		return nil // missing: already reported
	}
	var reads []string
	var doOnly *Capability
	for _, other := range v.m.Capabilities {
		switch {
		case other.Kind == KindRead && (other.Name == ref || other.ToolName() == ref):
			return other
		case other.Kind == KindRead:
			reads = append(reads, other.Name)
		case other.Kind == KindDo && (other.Name == ref || other.ToolName() == ref):
			doOnly = other
		}
	}
	if doOnly != nil {
		v.errorf(il.At.Of("capability"), ip+".capability", "%s is a do capability; an interlock compares a reading, so declare a read capability for that point and name it", doOnly.ToolName())
		return nil
	}
	slices.Sort(reads)
	v.errorf(il.At.Of("capability"), ip+".capability", "no read capability named %q%s", ref, strictyaml.SuggestAmong(strings.TrimPrefix(ref, "read_"), reads, "read capabilities"))
	return nil
}

// interlockCompare checks op and value against the source's data type.
func (v *validator) interlockCompare(ip string, il *Interlock) {
	if il.Op != "" && !slices.Contains(InterlockOps, il.Op) {
		v.errorf(il.At.Of("op"), ip+".op", "must be one of %s, got %q", strings.Join(InterlockOps, " "), il.Op)
		return
	}
	src := il.Source
	if src == nil || il.Value == nil {
		return
	}
	switch src.DataType {
	case TypeFloat, TypeInt:
		f, ok := number(il.Value)
		if !ok {
			v.errorf(il.At.Of("value"), ip+".value", "%s is a number, so value must be a number, got %v", src.ToolName(), il.Value)
			return
		}
		if r := src.Range; r != nil && (r.Min != nil && f < *r.Min || r.Max != nil && f > *r.Max) {
			v.warnf(il.At.Of("value"), ip+".value", "%v is outside %s's range %s, so the interlock never changes its answer", il.Value, src.ToolName(), r)
		}
	case TypeBool, TypeEnum, TypeString:
		if il.Op != "" && il.Op != "==" && il.Op != "!=" {
			v.errorf(il.At.Of("op"), ip+".op", "%s is %s: only == and != compare it, got %q", src.ToolName(), src.DataType, il.Op)
		}
		if msg := src.checkValue(il.Value); msg != "" {
			v.errorf(il.At.Of("value"), ip+".value", "%s (a value of %s)", msg, src.ToolName())
		}
	}
}
