//go:build !lite

package main

import (
	"fmt"
	"strings"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/profiles"
)

// endpoints are the MCP servers serve runs: over HTTP one per manifest group
// (or only --group's), over a stream the one --group names (default: the
// capabilities without a group).
func endpoints(e *engine.Engine, opts mcpserver.Options, cfg serveConfig, prof profiles.Profile) ([]mcpserver.Endpoint, error) {
	if cfg.transport() == profiles.HTTP && cfg.group == "" {
		eps, err := mcpserver.NewEndpoints(e, opts)
		if err == nil && prof.Name == profiles.Aggregator.Name {
			eps, err = withSite(e, opts, eps)
		}
		if err == nil && len(eps) > 1 {
			paths := make([]string, len(eps))
			for i, ep := range eps {
				paths[i] = ep.Path
			}
			opts.Logger.Info("endpoints, one per group", "paths", strings.Join(paths, " "))
		}
		return eps, err
	}
	opts.Group = cfg.group
	s, err := mcpserver.New(e, opts)
	if err != nil {
		return nil, err
	}
	return []mcpserver.Endpoint{{Group: cfg.group, Path: mcpserver.GroupPath(cfg.group), Server: s}}, nil
}

// withSite adds an aggregator's site endpoint at /mcp: can_do over every
// group. Every capability of an aggregator is in a group, so that the path
// is free.
func withSite(e *engine.Engine, opts mcpserver.Options, eps []mcpserver.Endpoint) ([]mcpserver.Endpoint, error) {
	for _, c := range e.Manifest().Capabilities {
		if c.Group == "" {
			return nil, fmt.Errorf("the aggregator serves the site's can_do at %s, so every capability needs a group: %s has none (give its bus's adopt a group)",
				mcpserver.EndpointPath, c.ToolName())
		}
	}
	opts.Group = mcpserver.SiteGroup
	s, err := mcpserver.New(e, opts)
	if err != nil {
		return nil, err
	}
	return append([]mcpserver.Endpoint{{Group: mcpserver.SiteGroup, Path: mcpserver.EndpointPath, Server: s}}, eps...), nil
}
