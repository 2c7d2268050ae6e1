package manifest

import (
	"fmt"
	"strings"
)

// How the capabilities a bus adopts wholesale are named (adopt.names).
// Identical devices (two greenhouse controllers, a row of pumps) offer the
// same tool names; an aggregator serves them all only under names that tell
// the devices apart, and those names must not depend on which device joined
// first, so that an agent's plan and the policy stay valid across restarts.
const (
	// NamesAsIs keeps the source's names (after prefix): the default of a
	// source the manifest lists, whose devices the operator knows.
	NamesAsIs = "as_is"
	// NamesDevicePrefixed puts the device's name in front: read_gh1_air_temperature.
	// The default of the mesh source, whose devices are not known in advance.
	NamesDevicePrefixed = "device_prefixed"
)

// The placeholders of a names template.
const (
	placeDevice     = "{device}"
	placeCapability = "{capability}"
)

// template is the template a names value stands for.
func namesTemplate(names string) string {
	switch names {
	case "", NamesAsIs:
		return placeCapability
	case NamesDevicePrefixed:
		return placeDevice + "_" + placeCapability
	}
	return names
}

// CapabilityName is the name a device's capability is adopted under:
// prefix, then the names rule applied to the device's name (its device id
// for the mesh source, the bus name for a source the manifest lists) and
// the capability's own name. read_ or do_ goes in front, as for any
// capability, so the verb stays first.
func (a *Adopt) CapabilityName(device, capability string) string {
	return a.Prefix + strings.NewReplacer(placeDevice, device, placeCapability, capability).Replace(namesTemplate(a.Names))
}

// NamesByDevice reports whether the names rule puts the device's name in
// the capability names (every rule but as_is).
func (a *Adopt) NamesByDevice() bool { return strings.Contains(namesTemplate(a.Names), placeDevice) }

// namesProblem says what is wrong with a names value, "" when nothing.
func namesProblem(names string) string {
	if names == NamesAsIs || names == NamesDevicePrefixed {
		return ""
	}
	if !strings.Contains(names, "{") {
		return fmt.Sprintf("must be %s, %s or a template with %s and %s such as %s_%s, got %q",
			NamesAsIs, NamesDevicePrefixed, placeDevice, placeCapability, placeDevice, placeCapability, names)
	}
	// the template's parts in order: literal text and placeholders
	var parts []string
	for rest := names; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			parts, rest = append(parts, rest), ""
			continue
		}
		if i > 0 {
			parts = append(parts, rest[:i])
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return fmt.Sprintf("template %q: a { without its }", names)
		}
		parts, rest = append(parts, rest[i:i+j+1]), rest[i+j+1:]
	}
	count := map[string]int{}
	for i, p := range parts {
		if p[0] == '{' {
			if p != placeDevice && p != placeCapability {
				return fmt.Sprintf("template %q: unknown placeholder %s; a template has %s and %s", names, p, placeDevice, placeCapability)
			}
			count[p]++
			if i > 0 && parts[i-1][0] == '{' {
				return fmt.Sprintf("template %q: put a separator such as _ between %s and %s, or device a's capability bc and device ab's capability c get the same name",
					names, parts[i-1], p)
			}
			continue
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				return fmt.Sprintf("template %q: %q may hold only lowercase letters, digits and _ besides the placeholders", names, p)
			}
		}
		if i == 0 && !(p[0] >= 'a' && p[0] <= 'z') {
			return fmt.Sprintf("template %q must start with a letter or a placeholder", names)
		}
	}
	switch {
	case count[placeCapability] != 1:
		return fmt.Sprintf("template %q must hold %s exactly once: each of a device's capabilities needs a name of its own", names, placeCapability)
	case count[placeDevice] != 1:
		return fmt.Sprintf("template %q must hold %s exactly once: without it two identical devices' tools get the same names (keep the source's names with %s)",
			names, placeDevice, NamesAsIs)
	}
	return ""
}

// ToolNameProblem says why tool cannot be a tool name ("" when it can):
// lowercase letters, digits and _, starting with a letter, at most 64
// characters, as proMCP asks.
func ToolNameProblem(tool string) string {
	switch {
	case !nameGrammar.MatchString(tool):
		return fmt.Sprintf("%q is not a tool name (lowercase letters, digits and _, starting with a letter)", tool)
	case len(tool) > maxToolName:
		return fmt.Sprintf("tool name %s is %d characters; the limit is %d", tool, len(tool), maxToolName)
	}
	return ""
}

// NotServed is a capability an adopted device offers that this device does
// not serve, and why: its tool name is already another's (a name
// collision), or is no tool name. can_do lists it blocked, with the reason,
// and the status page lists it, so that a device missing from the tools is
// seen by clients and operators, not only in the log.
type NotServed struct {
	// Capability is as it would be served: named, tagged and bound to the
	// device's bus.
	Capability *Capability
	// Device names the device: its device id (the mesh source) or its bus
	// (a source the manifest lists).
	Device string
	// Reason is PhysMCP's kind of reason, a colon and the details:
	// "name_collision: ...", "invalid_name: ..." or "policy_mismatch: ..."
	// (the policy's rules for it cannot hold for it).
	Reason string
}

// checkNames checks an adopt section's names and fills in the default: the
// mesh source's devices are not known in advance, so their names carry the
// device; a source the manifest lists keeps the source's names.
func (v *validator) checkNames(b *Bus, a *Adopt, ap string) {
	if !a.At.Has("names") {
		a.Names = NamesAsIs
		if b.MCP.Mesh {
			a.Names = NamesDevicePrefixed
		}
		return
	}
	if p := namesProblem(a.Names); p != "" {
		v.errorf(a.At.Of("names"), ap+".names", "%s", p)
		return
	}
	if !b.MCP.Mesh && a.NamesByDevice() && !nameGrammar.MatchString(b.Name) {
		v.errorf(a.At.Of("names"), ap+".names", "%s names each capability after the bus, and bus name %q is not a name (lowercase letters, digits and _): rename the bus", a.Names, b.Name)
	}
}
