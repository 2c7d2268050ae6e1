//go:build !lite

package main

import (
	"strings"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/profiles"
)

// endpoints are the MCP servers serve runs: over HTTP one per manifest group
// (or only --group's), over a stream the one --group names (default: the
// capabilities without a group).
func endpoints(e *engine.Engine, opts mcpserver.Options, cfg serveConfig) ([]mcpserver.Endpoint, error) {
	if cfg.transport() == profiles.HTTP && cfg.group == "" {
		eps, err := mcpserver.NewEndpoints(e, opts)
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
