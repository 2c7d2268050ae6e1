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
			h, request := benchServerSession(b, path == "mcp-go")
			call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_temperature_01"}}`
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, request(call))
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkHTTPToolsListServer is the server's side of tools/list over
// HTTP, answered from bytes (toolslist.go), without a client or a
// connection, the answer counted and dropped: what the server allocates per
// answer shows.
func BenchmarkHTTPToolsListServer(b *testing.B) {
	h, request := benchServerSession(b, false)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	w := &countingWriter{header: http.Header{}}
	h.ServeHTTP(w, request(list))
	size := w.n
	if w.status != http.StatusOK || size < 1000 {
		b.Fatalf("tools/list answered %d, %d bytes", w.status, size)
	}
	b.ReportAllocs()
	for b.Loop() {
		w.n = 0
		h.ServeHTTP(w, request(list))
	}
	if w.n != size {
		b.Fatalf("answered %d bytes, then %d", size, w.n)
	}
	b.ReportMetric(float64(size), "answer-B")
}

// countingWriter is a ResponseWriter that keeps the status, counts the
// body and keeps nothing of it.
type countingWriter struct {
	header http.Header
	status int
	n      int
}

func (w *countingWriter) Header() http.Header    { return w.header }
func (w *countingWriter) WriteHeader(status int) { w.status = status }
func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

// benchServerSession serves the benchmark device behind Protect (with the
// read_* fast path unless mcpGo), opens a session of the protocol in use
// today, and returns the handler and a function making a request in it.
func benchServerSession(b *testing.B, mcpGo bool) (http.Handler, func(body string) *http.Request) {
	m, diags := manifest.Parse("bench.manifest.yml", []byte(benchManifest()))
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	e, s := startDevice(b, m, nil)
	h := mcpserver.NewHTTPHandler(s, quietLogger())
	if mcpGo {
		mcpserver.DisableFastReads(h)
	}
	ph := mcpserver.Protect(h, mcpserver.Access{
		Local:   auth.Principal{Name: "local", Role: manifest.RoleOperator, Method: auth.MethodLocal},
		Permits: mcpserver.RolePermits(e), Logger: quietLogger(),
	})
	session := ""
	request := func(body string) *http.Request {
		req := httptest.NewRequest(http.MethodPost, mcpserver.EndpointPath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		}
		return req
	}
	for _, body := range []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + mcp.LATEST_LEGACY_PROTOCOL_VERSION +
		`","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`, `{"jsonrpc":"2.0","method":"notifications/initialized"}`} {
		rec := httptest.NewRecorder()
		ph.ServeHTTP(rec, request(body))
		if rec.Code/100 != 2 {
			b.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		if session == "" {
			session = rec.Header().Get("Mcp-Session-Id")
		}
	}
	return ph, request
}
