package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
)

// A proxy or aggregator adopts tools while it runs, so its policy may name
// tools its manifest does not have: by tool name (pending until a source
// offers it) or by a pattern. Each adopted tool is checked against the rules
// that apply to it when it is adopted (Adopted), as Parse checks the
// manifest's tools, and the names that match no tool yet are reported
// (Unmatched) instead of being errors.

// isPattern reports whether a capabilities key is a glob: tool and
// capability names have none of these characters.
func isPattern(key string) bool { return strings.ContainsAny(key, "*?[") }

// mayMatchTool reports whether a pattern may match some tool name: its
// literal start must fit read_ or do_. A pattern written like a capability
// name (gh?_vent_fan) matches none, and under a manifest that adopts it
// would only be reported as unmatched while the tools it was meant for are
// served without its rules.
func mayMatchTool(pattern string) bool {
	lit := pattern
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		lit = pattern[:i]
	}
	for _, prefix := range []string{"read_", "do_"} {
		if strings.HasPrefix(prefix, lit) || strings.HasPrefix(lit, prefix) {
			return true
		}
	}
	return false
}

// Rules returns the rules for a tool (by tool name), or nil: its own entry,
// else the first pattern in the file that matches it.
func (p *Policy) Rules(tool string) []*Rule {
	if tp, _ := p.entry(tool); tp != nil {
		return tp.Rules
	}
	return nil
}

// entry is the entry whose rules apply to tool (nil: none), and the other
// patterns that match it but do not apply. An entry of its own wins over
// every pattern.
func (p *Policy) entry(tool string) (applies *ToolPolicy, shadowed []*ToolPolicy) {
	if p == nil {
		return nil, nil
	}
	if tp := p.Capabilities[tool]; tp != nil {
		return tp, nil
	}
	for _, tp := range p.Patterns {
		if ok, _ := path.Match(tp.Tool, tool); !ok {
			continue
		}
		if applies == nil {
			applies = tp
		} else {
			shadowed = append(shadowed, tp)
		}
	}
	return applies, shadowed
}

// shadowed says that pattern o matches tool but tp, before it, applies.
func shadowed(tool string, tp, o *ToolPolicy) string {
	return fmt.Sprintf("%s matches this pattern but follows %q (line %d), the first pattern in the file that matches it; these rules do not apply to it",
		tool, tp.Tool, tp.At.Key.Line)
}

// Adopted checks the rules that apply to c, a capability adopted after the
// policy was parsed, against it, as Parse checks the manifest's tools: an
// error (a range guard outside its range, a rate rule on a read) means the
// rules cannot hold for c, and c must not be served under this policy. A
// capability of the manifest the policy was parsed against has no findings.
func (p *Policy) Adopted(c *manifest.Capability) strictyaml.Diags {
	if p == nil || p.checked[c] {
		return nil
	}
	tp, others := p.entry(c.ToolName())
	if tp == nil {
		return nil
	}
	var diags strictyaml.Diags
	v := &validator{d: strictyaml.NewDecoder(p.File, &diags), p: p}
	v.fit("capabilities."+tp.Tool, tp, c)
	for _, o := range others {
		v.warnf(o.At.Key, "capabilities."+o.Tool, "%s", shadowed(c.ToolName(), tp, o))
	}
	diags.Sort()
	return diags
}

// Expected is a name the policy gives tools it expects from adoption (a
// tool name the manifest does not have, or a pattern), and where it stands.
type Expected struct {
	Name string
	At   strictyaml.Pos
}

// Field is the key's path in the file, as findings name it.
func (x Expected) Field() string { return "capabilities." + x.Name }

// Unmatched lists the names the policy expects from adoption that apply to
// none of tools (the tools offered now): tool names the manifest does not
// have, and patterns, in file order.
func (p *Policy) Unmatched(tools []string) []Expected {
	if p == nil {
		return nil
	}
	var waiting []*ToolPolicy
	for _, tp := range p.Capabilities {
		if tp.pending && !slices.Contains(tools, tp.Tool) {
			waiting = append(waiting, tp)
		}
	}
	for _, tp := range p.Patterns {
		if !slices.ContainsFunc(tools, func(t string) bool { e, _ := p.entry(t); return e == tp }) {
			waiting = append(waiting, tp)
		}
	}
	slices.SortFunc(waiting, func(a, b *ToolPolicy) int { return a.At.Key.Line - b.At.Key.Line })
	out := make([]Expected, len(waiting))
	for i, tp := range waiting {
		out[i] = Expected{Name: tp.Tool, At: tp.At.Key}
	}
	return out
}
