//go:build !lite

package main

import (
	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/manifest"
)

// The Full build adopts capabilities from other MCP servers (mcp buses, the
// proxy and aggregator profiles); the Lite build links no MCP client.
func init() {
	buildOpeners[manifest.BusMCP] = adopt.Open
	expandAdopted = adopt.Expand
}
