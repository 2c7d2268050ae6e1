// Package mcpdial opens MCP client sessions for physmcpd's own calls to
// other MCP servers (adopted sources, mesh peers): one handshake, one way
// to reach a streamable HTTP endpoint.
package mcpdial

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// HTTP opens a session with the streamable HTTP endpoint url as client
// name; header, when not nil, gives each request's extra headers (a
// credential that may change between requests).
func HTTP(ctx context.Context, url, name string, header transport.HTTPHeaderFunc) (*client.Client, error) {
	var opts []transport.StreamableHTTPCOption
	if header != nil {
		opts = append(opts, transport.WithHTTPHeaderFunc(header))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, Handshake(ctx, c, name)
}

// Handshake runs initialize on a started client as name; c is closed when
// it fails.
func Handshake(ctx context.Context, c *client.Client, name string) error {
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: name, Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return fmt.Errorf("initialize: %w", err)
	}
	return nil
}
