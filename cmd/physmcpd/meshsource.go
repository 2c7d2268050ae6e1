//go:build !lite

package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/profiles"
)

// An aggregator whose manifest has a mesh source (an mcp bus with mesh:
// true) learns its devices from the mesh while it serves (meshadopt): its
// endpoints follow the engine's tools, and the endpoint of a group that
// appears (a device of a new zone) is mounted when it does.

// checkMeshSource refuses a mesh source that serve could not run: only the
// aggregator serves the groups its devices come and go in.
func checkMeshSource(prof profiles.Profile, m *manifest.Manifest) error {
	if b := m.MeshSource(); b != nil && prof.Name != profiles.Aggregator.Name {
		return errors.New("bus " + b.Name + ": a mesh source (mesh: true) is the aggregator's: serve with --profile aggregator, or set profile: aggregator in the manifest")
	}
	return nil
}

// followsTools says whether e's tools change while serving.
func followsTools(e *engine.Engine) bool { return e.Manifest().MeshSource() != nil }

// mountNewGroups serves, on h, the endpoint of every group that appears in
// e's tools after eps were built, with opts as they were.
func mountNewGroups(e *engine.Engine, opts mcpserver.Options, eps []mcpserver.Endpoint, h *mcpserver.HTTPHandler) {
	var mu sync.Mutex
	served := map[string]bool{}
	for _, ep := range eps {
		served[ep.Group] = true
	}
	e.OnToolsChange(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range mcpserver.Groups(e.Manifest()) {
			if served[g] || g == "" {
				continue
			}
			o := opts
			o.Group = g
			s, err := mcpserver.New(e, o)
			if err != nil {
				opts.Logger.Error("a new group cannot be served", "group", g, "err", err)
				continue
			}
			h.Mount(mcpserver.Endpoint{Group: g, Path: mcpserver.GroupPath(g), Server: s})
			served[g] = true
			opts.Logger.Info("endpoint added", "group", g, "path", mcpserver.GroupPath(g))
		}
	})
}

// adoptFromMesh adopts the mesh's devices into e until ctx ends (nothing
// without a mesh source); stop waits for it to end.
func adoptFromMesh(ctx context.Context, e *engine.Engine, ms *mesh.Mesh, node *meshNode, logger *slog.Logger) (stop func(), err error) {
	src := e.Manifest().MeshSource()
	if src == nil || ms == nil {
		return func() {}, nil
	}
	a, err := meshadopt.New(meshadopt.Config{Source: src, Node: ms.Self().NodeID, Keys: node.keys, Logger: logger}, ms, e)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	logger.Info("adopting the devices of the mesh", "bus", src.Name, "group_by", src.MCP.Adopt.GroupBy, "group", src.MCP.Adopt.Group)
	return func() { cancel(); <-done }, nil
}
