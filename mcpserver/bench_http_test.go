//go:build !lite

package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// benchHTTPSession is the benchmark device served as serve does it (Protect
// in front of the endpoint, no token required on loopback), and a client of
// the protocol in use today (legacy handshake, a session).
func benchHTTPSession(b *testing.B) *client.Client {
	b.Helper()
	m, diags := manifest.Parse("bench.manifest.yml", []byte(benchManifest()))
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	e, s := startDevice(b, m, nil)
	h := mcpserver.Protect(mcpserver.NewHTTPHandler(s, quietLogger()), mcpserver.Access{
		Local:   auth.Principal{Name: "local", Role: manifest.RoleOperator, Method: auth.MethodLocal},
		Permits: mcpserver.RolePermits(e), Logger: quietLogger(),
	})
	ts := httptest.NewServer(h)
	b.Cleanup(ts.Close)
	tr, err := transport.NewStreamableHTTP(ts.URL + mcpserver.EndpointPath)
	if err != nil {
		b.Fatal(err)
	}
	c := client.NewClient(tr)
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "test"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHTTPReadCached is a cached read_* over HTTP end to end: the
// client, Protect's checks, the session table, mcp-go and the adapter.
func BenchmarkHTTPReadCached(b *testing.B) {
	c := benchHTTPSession(b)
	callTool(b, c, "read_temperature_01", nil)
	b.ReportAllocs()
	for b.Loop() {
		callTool(b, c, "read_temperature_01", nil)
	}
}

// BenchmarkHTTPToolsList is tools/list over HTTP, the client's decoding included.
func BenchmarkHTTPToolsList(b *testing.B) {
	c := benchHTTPSession(b)
	for b.Loop() {
		if _, err := c.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
