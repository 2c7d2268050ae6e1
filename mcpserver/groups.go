package mcpserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A device whose tools would crowd one server (proMCP advises at most 8
// tools and 5 do_* per server) splits its capabilities into manifest groups.
// Each group is an endpoint of its own: the group's read_* and do_* tools
// plus a can_do that answers for them alone. Capabilities without a group
// form the default endpoint.

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

// GroupPath is the HTTP path of a group's endpoint: EndpointPath for the
// default group, EndpointPath/<group> for the others.
func GroupPath(group string) string {
	if group == "" {
		return EndpointPath
	}
	return EndpointPath + "/" + group
}

// groupTools are the engine's tools a group's endpoint serves, in the
// engine's order: the group's capabilities and can_do.
func groupTools(e *engine.Engine, group string) ([]engine.Tool, error) {
	groups := Groups(e.Manifest())
	if !slices.Contains(groups, group) {
		return nil, fmt.Errorf("%s", noSuchGroup(group, groups))
	}
	var out []engine.Tool
	for _, t := range e.Tools() {
		if t.Capability == nil || t.Capability.Group == group {
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

// GroupTools describes the tools of one group's endpoint (see Tools).
func GroupTools(e *engine.Engine, group string) ([]mcp.Tool, error) {
	all, err := Tools(e)
	if err != nil {
		return nil, err
	}
	byName := map[string]mcp.Tool{}
	for _, t := range all {
		byName[t.Name] = t
	}
	served, err := groupTools(e, group)
	if err != nil {
		return nil, err
	}
	out := make([]mcp.Tool, len(served))
	for i, t := range served {
		out[i] = byName[t.Name]
	}
	return out, nil
}

// groupNote tells a client connected to one group where the others are.
func groupNote(m *manifest.Manifest, group string) string {
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
	if group != "" {
		this = "group " + group
	}
	return fmt.Sprintf("\nThis endpoint serves %s of the device, and can_do answers for these tools only. "+
		"The device's other tools are on its other endpoints (HTTP %s).", this, strings.Join(others, ", "))
}

// scopeCanDo limits a can_do request to the tools this endpoint serves. A
// scope the caller gave keeps the entries that name those tools (the device id
// names them all); when none is left, empty says why nothing can match.
func (a *adapter) scopeCanDo(req *promcp.CanDoRequest) (empty string) {
	if a.served == nil {
		return ""
	}
	var names []string
	for name := range a.served {
		if name != "can_do" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(req.Scope) == 0 {
		req.Scope = names
		return ""
	}
	var kept []string
	for _, s := range req.Scope {
		switch {
		case s == a.m.Device.ID:
			kept = append(kept, names...)
		case a.served[s] || a.served["read_"+s] || a.served["do_"+s]:
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return fmt.Sprintf("scope [%s] names nothing this endpoint serves (%s)", strings.Join(req.Scope, ", "), strings.Join(names, ", "))
	}
	req.Scope = kept
	return ""
}

// trimReport drops related reads this endpoint does not serve: a client
// connected here cannot call them.
func (a *adapter) trimReport(rep *promcp.CapabilityReport) {
	if a.served == nil {
		return
	}
	reads := rep.Context.RelatedReads[:0]
	for _, r := range rep.Context.RelatedReads {
		if a.served[r] {
			reads = append(reads, r)
		}
	}
	rep.Context.RelatedReads = reads
	for tool := range rep.Context.CurrentObservations {
		if !a.served[tool] {
			delete(rep.Context.CurrentObservations, tool)
		}
	}
}

// Endpoint is one group's MCP server.
type Endpoint struct {
	Group  string
	Path   string
	Server *server.MCPServer
}

// NewEndpoints builds one MCP server per group of e's manifest (opts.Group
// is ignored): the default endpoint first when the device has capabilities
// without a group.
func NewEndpoints(e *engine.Engine, opts Options) ([]Endpoint, error) {
	var eps []Endpoint
	for _, g := range Groups(e.Manifest()) {
		o := opts
		o.Group = g
		s, err := New(e, o)
		if err != nil {
			return nil, err
		}
		eps = append(eps, Endpoint{Group: g, Path: GroupPath(g), Server: s})
	}
	return eps, nil
}

// NewEndpointsHandler serves each endpoint over streamable HTTP at its path,
// their sessions bounded together by limits (zero fields take the defaults).
// When every capability has a group, EndpointPath answers 404 naming the
// group endpoints, so a client pointed at it learns where to go.
func NewEndpointsHandler(eps []Endpoint, logger *slog.Logger, limits SessionLimits) *HTTPHandler {
	h := newHTTPHandler(logger, limits)
	var paths []string
	for _, ep := range eps {
		h.mount(ep.Path, ep.Server)
		paths = append(paths, ep.Path)
	}
	if !slices.Contains(paths, EndpointPath) {
		h.mux.HandleFunc(EndpointPath, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "this device serves its tools in groups, one MCP endpoint each: "+strings.Join(paths, ", "), http.StatusNotFound)
		})
	}
	return h
}
