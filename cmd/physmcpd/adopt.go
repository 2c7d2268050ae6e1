//go:build !lite

package main

import (
	"context"
	"log/slog"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/manifest"
)

// The Full build adopts capabilities from other MCP servers (mcp buses, the
// proxy and aggregator profiles); the Lite build links no MCP client.
func init() {
	buildOpeners[manifest.BusMCP] = adopt.Open
	expandAdopted = func(ctx context.Context, m *manifest.Manifest, buses map[string]drivers.Bus, logger *slog.Logger) error {
		// the devices the manifest lists; the mesh will add the ones it learns
		return adopt.Expand(ctx, m, buses, adopt.Static{M: m}, logger)
	}
}
