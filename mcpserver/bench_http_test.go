//go:build !lite

package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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

// BenchmarkHTTPReadCachedServer is the server's side of a cached read_*
// over HTTP, without a client or a connection: Protect, the session table
// and the call answered on the fast path (fastread.go) or by mcp-go.
func BenchmarkHTTPReadCachedServer(b *testing.B) {
	for _, path := range []string{"fast", "mcp-go"} {
		b.Run(path, func(b *testing.B) {
			m, diags := manifest.Parse("bench.manifest.yml", []byte(benchManifest()))
			if diags.HasErrors() {
				b.Fatal(diags)
			}
			e, s := startDevice(b, m, nil)
			h := mcpserver.NewHTTPHandler(s, quietLogger())
			if path == "mcp-go" {
				mcpserver.DisableFastReads(h)
			}
			ph := mcpserver.Protect(h, mcpserver.Access{
				Local:   auth.Principal{Name: "local", Role: manifest.RoleOperator, Method: auth.MethodLocal},
				Permits: mcpserver.RolePermits(e), Logger: quietLogger(),
			})
			post := func(session, body string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, mcpserver.EndpointPath, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if session != "" {
					req.Header.Set("Mcp-Session-Id", session)
					req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
				}
				rec := httptest.NewRecorder()
				ph.ServeHTTP(rec, req)
				if rec.Code/100 != 2 {
					b.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
				}
				return rec
			}
			session := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcp.LATEST_LEGACY_PROTOCOL_VERSION+
				`","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`).Header().Get("Mcp-Session-Id")
			post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_temperature_01"}}`
			post(session, call)
			b.ReportAllocs()
			for b.Loop() {
				post(session, call)
			}
		})
	}
}
