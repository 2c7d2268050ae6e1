//go:build !lite

package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

const accessManifest = "testdata/access/physmcp.manifest.yml"

// countingBus counts the writes that reach the simulated Modbus bus.
type countingBus struct {
	drivers.ModbusBus
	writes atomic.Int64
}

func (b *countingBus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error {
	b.writes.Add(1)
	return b.ModbusBus.WriteRegisters(ctx, unit, addr, values)
}

func (b *countingBus) WriteCoils(ctx context.Context, unit uint8, addr uint16, values []bool) error {
	b.writes.Add(1)
	return b.ModbusBus.WriteCoils(ctx, unit, addr, values)
}

// accessDevice is the test boiler served over HTTP behind Protect.
type accessDevice struct {
	url   string // base URL of the test server
	bus   *countingBus
	clock *testclock.Clock
	audit chan auth.AuditEvent
	dir   string
	acc   mcpserver.Access
}

func loadAccessManifest(t *testing.T) *manifest.Manifest {
	t.Helper()
	m, diags := manifest.Load(accessManifest)
	if diags.HasErrors() {
		t.Fatalf("manifest: %v", diags)
	}
	return m
}

// startAccessDevice serves the test boiler under policyYAML, written with
// files (key files) into a fresh temp dir; overrideKey enables overrides.
func startAccessDevice(t *testing.T, policyYAML string, files map[string]string, overrideKey []byte, maxBody int64) *accessDevice {
	t.Helper()
	d, h := newAccessDevice(t, policyYAML, files, overrideKey, mcpserver.Access{MaxBodyBytes: maxBody})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	d.url = ts.URL
	return d
}

// newAccessDevice is the test boiler behind Protect, not yet served; acc
// gives the limits, the rest of Access comes from the policy.
func newAccessDevice(t *testing.T, policyYAML string, files map[string]string, overrideKey []byte, acc mcpserver.Access) (*accessDevice, http.Handler) {
	t.Helper()
	m := loadAccessManifest(t)
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "physmcp.policy.yml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	p, diags := policy.Load(path, m)
	if diags.HasErrors() {
		t.Fatalf("policy: %v", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	bus := &countingBus{ModbusBus: buses["rs485"].(drivers.ModbusBus)}
	buses["rs485"] = bus
	e, err := engine.New(m, p, buses, engine.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	clock := testclock.New(time.Now())
	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	s, err := mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Caller: mcpserver.CallerFrom(local), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	audit := make(chan auth.AuditEvent, 16)
	a, err := auth.New(p, auth.Options{Now: clock.Now, DeviceID: m.Device.ID, OverrideKey: overrideKey, Audit: func(ev auth.AuditEvent) { audit <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	acc.Auth, acc.Local = a, auth.Principal{Name: "local", Role: p.LocalRole(), Method: auth.MethodLocal}
	acc.Permits, acc.ResourceName, acc.Logger = mcpserver.RolePermits(e), m.Device.ID, quietLogger()
	h := mcpserver.Protect(mcpserver.NewHTTPHandler(s, quietLogger()), acc)
	return &accessDevice{bus: bus, clock: clock, audit: audit, dir: dir, acc: acc}, h
}

// connect starts an MCP client on the device's endpoint.
func (d *accessDevice) connect(t *testing.T, headers map[string]string, hc *http.Client, opts ...client.ClientOption) *client.Client {
	t.Helper()
	topts := []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(headers)}
	if hc != nil {
		topts = append(topts, transport.WithHTTPBasicClient(hc))
	}
	tr, err := transport.NewStreamableHTTP(d.url+mcpserver.EndpointPath, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, opts...)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-access", Version: "test"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func callDo(t *testing.T, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	return c.CallTool(context.Background(), req)
}

func toolNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}
