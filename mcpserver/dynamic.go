package mcpserver

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
)

// An aggregator over the mesh adopts devices while it serves: its engine's
// tools change (engine.OnToolsChange), and a server made with
// Options.ToolsChange follows them. It declares tools.listChanged (and
// resources.listChanged), so that mcp-go tells every session
// (notifications/tools/list_changed) when it lists its tools again.

// toolsVersions holds the tools version of each server whose tools change:
// odd while a change is under way. The tools/list cache of its HTTP
// endpoints (toolslist.go) keys its answers by it.
var toolsVersions sync.Map // *server.MCPServer → *atomic.Uint64

// toolsVersion is s's tools version, nil for a server whose tools never change.
func toolsVersion(s *server.MCPServer) *atomic.Uint64 {
	if v, ok := toolsVersions.Load(s); ok {
		return v.(*atomic.Uint64)
	}
	return nil
}

// followTools lists the server's tools (and reading resources) again on
// every change of the engine's tools.
func (a *adapter) followTools() {
	version := &atomic.Uint64{}
	toolsVersions.Store(a.server, version)
	a.e.OnToolsChange(func() {
		a.surface.Refresh()
		tools, fast, err := a.serverTools()
		if err != nil {
			a.opts.Logger.Error("the tools changed and cannot be listed; the endpoint keeps its previous list", "group", a.opts.Group, "err", err)
			return
		}
		// Cached lists are neither served nor learnt until the new list is
		// in place, and the sessions are told (by SetTools) only then.
		version.Add(1)
		a.fast.setTools(fast)
		a.fast.broadcasting() // SetTools and the resources' changes tell every session
		a.server.SetTools(tools...)
		version.Add(1)
		a.resources.follow(a.surface.Tools())
	})
}

// follow adds the reading resources of read tools new to the endpoint and
// deletes those of tools it no longer serves.
func (r *resources) follow(tools []engine.Tool) {
	served := map[string]bool{}
	var added []server.ServerResource
	for _, t := range tools {
		if t.Kind != engine.ToolRead {
			continue
		}
		uri := ReadingURI(r.a.m.Device.ID, t.Capability.Name)
		served[uri] = true
		r.mu.RLock()
		known := r.readers[uri] == t.Name
		r.mu.RUnlock()
		if !known {
			res, h := r.reading(t)
			added = append(added, server.ServerResource{Resource: res, Handler: h})
		}
	}
	r.mu.Lock()
	var gone []string
	for uri := range r.readers {
		if !served[uri] {
			gone = append(gone, uri)
			delete(r.readers, uri)
		}
	}
	r.mu.Unlock()
	if len(gone) > 0 {
		slices.Sort(gone)
		r.a.server.DeleteResources(gone...)
	}
	if len(added) > 0 {
		r.a.server.AddResources(added...)
	}
}

// Mount serves ep too, on a handler that may already be serving: the
// endpoint of a group that appears when an aggregator adopts a device of a
// new zone. Its sessions count against the handler's limits.
func (h *HTTPHandler) Mount(ep Endpoint) { h.mount(ep.Path, ep.Server) }
