package mcpserver

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
)

// Groups lists the device's endpoint groups (see mcpcore.Groups).
func Groups(m *manifest.Manifest) []string { return mcpcore.Groups(m) }

// SiteGroup is an aggregator's site endpoint (see mcpcore.SiteGroup).
const SiteGroup = mcpcore.SiteGroup

// GroupPath is the HTTP path of a group's endpoint (see mcpcore.GroupPath).
func GroupPath(group string) string { return mcpcore.GroupPath(group) }

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
	served, err := mcpcore.GroupTools(e, group)
	if err != nil {
		return nil, err
	}
	out := make([]mcp.Tool, len(served))
	for i, t := range served {
		out[i] = byName[t.Name]
	}
	return out, nil
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
