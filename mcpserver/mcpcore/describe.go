package mcpcore

import (
	"fmt"
	"strings"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// compensable matches the engine: an action can be undone by writing the
// previous value back unless the manifest says it cannot.
func compensable(c *manifest.Capability) bool { return c.Compensable == nil || *c.Compensable }

func noArguments() promcp.Schema {
	return promcp.Schema{"type": "object", "properties": promcp.Schema{}, "additionalProperties": false}
}

// readDescription must not sound like a mutation: the reference linter flags
// create/update/delete/set/reset/trigger/send/write/insert/modify in read_*
// descriptions, so the facts added here avoid those words.
func readDescription(c *manifest.Capability) string {
	var b strings.Builder
	b.WriteString(sentence(c.Description))
	b.WriteString(" Observation only, no side effects; safe to call in parallel.")
	fmt.Fprintf(&b, " Returns %s%s with the time it was measured and its quality (good, stale, degraded or error).",
		valueKind(c), unitClause(c))
	if c.IsNumeric() && c.Range != nil && (c.Range.Min != nil || c.Range.Max != nil) {
		fmt.Fprintf(&b, " Plausible range %s; a value outside it comes back as degraded.", promcp.RangeText(c.Range, c.Unit))
	}
	if ttl := c.CacheTTL(); ttl > 0 {
		fmt.Fprintf(&b, " Answers within %s of a previous measurement come from cache.", ttl)
	} else {
		b.WriteString(" Every call measures afresh.")
	}
	return b.String()
}

// doDescription states the manifest's facts, then policyFacts, then the contract.
func doDescription(c *manifest.Capability, policyFacts string) string {
	var b strings.Builder
	b.WriteString(sentence(c.Description))
	fmt.Fprintf(&b, " Acts on the physical device: value is %s%s", valueKind(c), unitClause(c))
	if c.IsNumeric() && c.Range != nil && (c.Range.Min != nil || c.Range.Max != nil) {
		fmt.Fprintf(&b, ", hard limits %s (the policy may allow less; can_do tells)", promcp.RangeText(c.Range, c.Unit))
	}
	b.WriteString(".")
	if len(c.SideEffects) > 0 {
		fmt.Fprintf(&b, " Side effects: %s.", strings.Join(c.SideEffects, ", "))
	}
	if c.CooldownMs > 0 {
		fmt.Fprintf(&b, " Cooldown %s between changes.", c.Cooldown())
	}
	if c.RateLimit != nil {
		fmt.Fprintf(&b, " Rate limit %s.", c.RateLimit.Text)
	}
	b.WriteString(interlockFacts(c))
	b.WriteString(policyFacts)
	if compensable(c) {
		b.WriteString(" Compensable: the response names the call that restores the previous value.")
	} else {
		b.WriteString(" Not compensable: the effect cannot be undone.")
	}
	b.WriteString(" Call can_do first and act only on an allowed candidate before its valid_until." +
		" Retries with the same idempotency_key are safe: the first outcome is returned and nothing acts twice.")
	return b.String()
}

// accessFacts says who may call a tool and when (read_* and do_* alike).
func accessFacts(p *policy.Policy, tool string, c *manifest.Capability) string {
	var b strings.Builder
	min := c.RequiresPermission
	if def := p.DefaultRole(); def.Rank() > min.Rank() {
		min = def
	}
	if min != "" && min != manifest.RoleNone {
		fmt.Fprintf(&b, " Needs role %s or higher.", min)
	}
	for _, r := range p.Rules(tool) {
		switch {
		case r.Permission != nil:
			roles := make([]string, len(r.Permission.Require))
			for i, role := range r.Permission.Require {
				roles[i] = string(role)
			}
			fmt.Fprintf(&b, " Policy: only roles %s.", strings.Join(roles, ", "))
		case r.TimeWindow != nil:
			if len(r.TimeWindow.AllowDuring) > 0 {
				fmt.Fprintf(&b, " Policy: only during %s.", strings.Join(r.TimeWindow.AllowDuring, ", "))
			}
			if len(r.TimeWindow.DenyDuring) > 0 {
				fmt.Fprintf(&b, " Policy: never during %s.", strings.Join(r.TimeWindow.DenyDuring, ", "))
			}
		}
	}
	return b.String()
}

// limitFacts states the policy's limits on a do_* tool.
func limitFacts(p *policy.Policy, tool string, c *manifest.Capability) string {
	var b strings.Builder
	rated := c.RateLimit != nil
	for _, r := range p.Rules(tool) {
		switch {
		case r.Rate != nil && r.Rate.Max != nil:
			rated = true
			fmt.Fprintf(&b, " Policy rate limit %s.", r.Rate.Max.Text)
		case r.RangeGuard != nil:
			g := r.RangeGuard
			fmt.Fprintf(&b, " Policy range guard %s: %s.", promcp.RangeText(&manifest.Range{Min: g.Min, Max: g.Max}, c.Unit), guardEffect[g.OnViolation])
		case r.Quorum != nil:
			fmt.Fprintf(&b, " Needs %d reachable nodes (quorum).", r.Quorum.MinPeers)
		case r.Approval != nil:
			b.WriteString(" Every call waits for a person's approval.")
		}
	}
	if !rated && p != nil && p.Defaults != nil && p.Defaults.RateLimit != nil {
		fmt.Fprintf(&b, " Policy rate limit %s.", p.Defaults.RateLimit.Text)
	}
	return b.String()
}

var guardEffect = map[policy.Violation]string{
	policy.ViolationDeny:  "a value outside it is refused",
	policy.ViolationClamp: "a value outside it is clamped to the guard (status partial)",
	policy.ViolationWarn:  "a value outside it is written with a warning",
}

func canDoDescription(m *manifest.Manifest) string {
	return fmt.Sprintf("Checks, without acting, whether an intended action is allowed and feasible right now on %s."+
		" Give intent.semantic_tags (what it is about), intent.action (%s), and for a change intent.target and intent.value"+
		" (PhysMCP's query may stand for intent: give exactly one)."+
		" Returns the best-matching candidates (tool, permission, confidence, constraints, current state, valid_until), blocked tools with the reason,"+
		" unroutable entries when nothing matches, and the read_* tools to check first"+
		" (at most max_candidates candidates, blocked tools and reads each, default %d; metadata.omitted counts the rest)."+
		" Act only on a candidate whose permission is allowed, before its valid_until; confidence below 0.7 means confirm with a person first.",
		m.Device.ID, strings.Join(promcp.Actions, ", "), promcp.DefaultMaxCandidates)
}

func valueKind(c *manifest.Capability) string {
	switch c.DataType {
	case manifest.TypeFloat:
		return "a number"
	case manifest.TypeInt:
		return "an integer"
	case manifest.TypeBool:
		return "true or false"
	case manifest.TypeEnum:
		return "one of " + strings.Join(c.EnumValues, ", ")
	}
	return "a string"
}

func unitClause(c *manifest.Capability) string {
	if c.Unit == "" {
		return ""
	}
	return " in " + c.Unit
}

// sentence ends a manifest description with a full stop so added facts read on.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}

func words(name string) string { return strings.ReplaceAll(name, "_", " ") }
