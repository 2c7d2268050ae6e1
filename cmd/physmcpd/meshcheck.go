package main

import (
	"errors"
	"fmt"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

// checkMesh refuses, before any bus is opened, a mesh that serve could not
// join: peers reach a node at its MCP endpoint, so a mesh node serves HTTP,
// and its keyring must load.
func checkMesh(cfg serveConfig, m *manifest.Manifest) error {
	ms := meshOf(m)
	if ms == nil {
		return nil
	}
	if cfg.transport() != profiles.HTTP {
		return errors.New("network.mesh.enabled: peers call a mesh node at its MCP endpoint over HTTP: serve with --http " +
			"(the lite build and --stdio or --serial cannot join a mesh; set enabled: false for them)")
	}
	if _, err := ms.LoadKeys(m.File); err != nil {
		return fmt.Errorf("network.mesh.key_file: %v", err)
	}
	return nil
}

// meshOf is the manifest's mesh section when the mesh is enabled, else nil.
func meshOf(m *manifest.Manifest) *manifest.Mesh {
	if m.Network == nil || m.Network.Mesh == nil || !m.Network.Mesh.Enabled {
		return nil
	}
	return m.Network.Mesh
}

// meshKeyDiags reports a network.mesh.key_file that serve could not load,
// at the line naming it (a relative path is relative to the manifest).
func meshKeyDiags(m *manifest.Manifest) strictyaml.Diags {
	if m == nil || m.Network == nil || m.Network.Mesh == nil || m.Network.Mesh.KeyFile == "" {
		return nil
	}
	var diags strictyaml.Diags
	ms := m.Network.Mesh
	if _, err := ms.LoadKeys(m.File); err != nil {
		diags.Errorf(ms.At.Of("key_file"), "network.mesh.key_file: %v (see docs/mesh.md)", err)
	}
	return diags
}
