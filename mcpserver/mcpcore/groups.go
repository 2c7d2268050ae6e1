package mcpcore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
)

// A device whose tools would crowd one server (proMCP advises at most 8
// tools and 5 do_* per server) splits its capabilities into manifest groups.
// Each group is an endpoint of its own: the group's read_* and do_* tools
// plus a can_do that answers for them alone. Capabilities without a group
// form the default endpoint.

// EndpointPath is where the streamable HTTP transport serves the default group.
const EndpointPath = "/mcp"

// Groups lists the device's endpoint groups in manifest order; "" stands for
// the capabilities without a group and comes first when there are any.
func Groups(m *manifest.Manifest) []string {
	var groups []string
	for _, c := range m.Capabilities {
		if !slices.Contains(groups, c.Group) {
			groups = append(groups, c.Group)
		}
	}
	if i := slices.Index(groups, ""); i > 0 {
		groups = append([]string{""}, slices.Delete(groups, i, i+1)...)
	}
	return groups
}

// SiteGroup is an aggregator's site endpoint, at EndpointPath: can_do
// alone, over the capabilities of every group, each entry naming the
// endpoint that serves it. No manifest group can have this name.
const SiteGroup = "(site)"

// GroupPath is the HTTP path of a group's endpoint: EndpointPath for the
// default group (and the site endpoint), EndpointPath/<group> for the others.
func GroupPath(group string) string {
	if group == "" || group == SiteGroup {
		return EndpointPath
	}
	return EndpointPath + "/" + group
}

// GroupTools are the engine's tools a group's endpoint serves, in the
// engine's order: the group's capabilities and can_do.
func GroupTools(e *engine.Engine, group string) ([]engine.Tool, error) {
	groups := Groups(e.Manifest())
	if group == SiteGroup {
		tools := e.Tools()
		return tools[len(tools)-1:], nil // can_do
	}
	if !slices.Contains(groups, group) {
		return nil, fmt.Errorf("%s", noSuchGroup(group, groups))
	}
	var out []engine.Tool
	for _, t := range e.Tools() {
		if t.Kind == engine.ToolCanDo || t.Group() == group {
			out = append(out, t)
		}
	}
	return out, nil
}

func noSuchGroup(group string, groups []string) string {
	named := make([]string, 0, len(groups))
	for _, g := range groups {
		if g != "" {
			named = append(named, g)
		}
	}
	if group == "" {
		return fmt.Sprintf("every capability of this device belongs to a group; choose one of %s", strings.Join(named, ", "))
	}
	if len(named) == 0 {
		return fmt.Sprintf("no capability is in group %q: this device has no groups", group)
	}
	return fmt.Sprintf("no capability is in group %q; the device's groups are %s", group, strings.Join(named, ", "))
}

// GroupNote tells a client connected to one group where the others are.
func GroupNote(m *manifest.Manifest, group string) string {
	groups := Groups(m)
	if len(groups) < 2 {
		return ""
	}
	var others []string
	for _, g := range groups {
		if g != group {
			others = append(others, GroupPath(g))
		}
	}
	this := "the capabilities without a group"
	switch group {
	case SiteGroup:
		return fmt.Sprintf("\nThis endpoint is the site's can_do: it answers for every tool of every group, and each candidate "+
			"names in endpoint the HTTP path that serves its tool (%s).", strings.Join(others, ", "))
	case "":
	default:
		this = "group " + group
	}
	return fmt.Sprintf("\nThis endpoint serves %s of the device, and can_do answers for these tools only. "+
		"The device's other tools are on its other endpoints (HTTP %s).", this, strings.Join(others, ", "))
}
