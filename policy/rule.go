package policy

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// ruleTypes lists the rule types, each with the struct its keys decode into.
var ruleTypes = []struct {
	name RuleType
	keys reflect.Type
}{
	{RuleTimeWindow, reflect.TypeFor[TimeWindowRule]()},
	{RulePermission, reflect.TypeFor[PermissionRule]()},
	{RuleRate, reflect.TypeFor[RateRule]()},
	{RuleQuorum, reflect.TypeFor[QuorumRule]()},
	{RuleRangeGuard, reflect.TypeFor[RangeGuard]()},
	{RuleHumanApproval, reflect.TypeFor[ApprovalRule]()},
}

// ruleHead is the discriminator every rule starts with.
type ruleHead struct {
	Type RuleType `yaml:"type,required"`

	At Positions `yaml:"-"`
}

// UnmarshalStrict reads type, then decodes the other keys strictly into the
// part for that type, so a key of another rule type is reported as unknown.
func (r *Rule) UnmarshalStrict(d *strictyaml.Decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "expected a rule (a mapping with type), got %s", strictyaml.Describe(n))
		return
	}
	headNode, rest := strictyaml.SplitMapping(n, "type")
	var h ruleHead
	d.Decode(headNode, &h, path)
	r.Type = h.Type
	r.At = strictyaml.Positions{Self: d.Pos(n), Values: map[string]strictyaml.Pos{}}
	for k, p := range h.At.Values {
		r.At.Values[k] = p
	}
	var part any
	switch h.Type {
	case RuleTimeWindow:
		r.TimeWindow = &TimeWindowRule{}
		part = r.TimeWindow
	case RulePermission:
		r.Permission = &PermissionRule{}
		part = r.Permission
	case RuleRate:
		r.Rate = &RateRule{}
		part = r.Rate
	case RuleQuorum:
		r.Quorum = &QuorumRule{}
		part = r.Quorum
	case RuleRangeGuard:
		r.RangeGuard = &RangeGuard{}
		part = r.RangeGuard
	case RuleHumanApproval:
		r.Approval = &ApprovalRule{}
		part = r.Approval
	case "":
		return // missing: already reported
	default:
		names := make([]string, len(ruleTypes))
		for i, t := range ruleTypes {
			names[i] = string(t.name)
		}
		hint := fmt.Sprintf("; expected one of %s", strings.Join(names, ", "))
		if best := strictyaml.Closest(string(h.Type), names); best != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", best)
		}
		if h.Type == "cooldown" {
			hint = " (cooldowns are set in the manifest: cooldown_ms)"
		}
		d.ErrorAt(h.At.Of("type"), path+".type", "unknown rule type %q%s", h.Type, hint)
		return
	}
	d.Decode(rest, part, path)
	for i := 0; i+1 < len(rest.Content); i += 2 {
		r.At.Values[rest.Content[i].Value] = d.Pos(rest.Content[i+1])
	}
}
