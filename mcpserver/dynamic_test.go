//go:build !lite

package mcpserver_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// siteSource serves one of examples/site's devices over HTTP and returns
// its endpoint URL.
func siteSource(t *testing.T, device string) string {
	t.Helper()
	m, p := loadDeviceFiles(t, "../examples/site/"+device)
	_, s := startDevice(t, m, p)
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{{Path: mcpserver.EndpointPath, Server: s}}, quietLogger(), mcpserver.SessionLimits{})
	base, _ := loopback(t, h)
	t.Cleanup(func() { h.CloseSessions(context.Background()) })
	return base + mcpserver.EndpointPath
}

func loadDeviceFiles(t *testing.T, dir string) (*manifest.Manifest, *policy.Policy) {
	return loadDevice(t, dir+"/physmcp.manifest.yml", dir+"/physmcp.policy.yml")
}

// adoptInto adopts every tool of the source at url into group, as bus.
func adoptInto(t *testing.T, e *engine.Engine, bus, url, group string) {
	t.Helper()
	src := &manifest.MCPBus{URL: url, Adopt: &manifest.Adopt{Tools: manifest.AdoptAll, Group: group}}
	b := adopt.New(bus, src, quietLogger())
	tools, err := b.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	caps, _ := adopt.Adopted(bus, bus, src.Adopt, tools, quietLogger())
	if err := e.Adopt(&manifest.Bus{Name: bus, Type: manifest.BusMCP, MCP: src}, b, caps, nil); err != nil {
		t.Fatal(err)
	}
}

func toolNamesOf(t *testing.T, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// An endpoint whose engine adopts devices while it serves (ToolsChange)
// lists the new tools at once, though it answers tools/list from a cache,
// tells its sessions of both protocol eras, and serves the reading
// resources of the new read tools; an endpoint mounted later serves a
// group that appeared.
func TestEndpointsFollowTheTools(t *testing.T) {
	m, p := loadDeviceFiles(t, "../examples/site/aggregator")
	m.Buses, m.Capabilities = nil, nil // adopted below, while serving
	e := simEngine(t, m, p, nil)
	opts := groupOptions(e, mcpserver.SiteGroup)
	opts.ToolsChange = true
	adoptInto(t, e, "pump", siteSource(t, "pump"), "plant_room")

	site, err := mcpserver.New(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Group = "plant_room"
	plant, err := mcpserver.New(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{
		{Group: mcpserver.SiteGroup, Path: mcpserver.EndpointPath, Server: site},
		{Group: "plant_room", Path: mcpserver.GroupPath("plant_room"), Server: plant}}, quietLogger(), mcpserver.SessionLimits{})
	base, _ := loopback(t, h)
	t.Cleanup(func() { h.CloseSessions(context.Background()) })

	modern := dialURL(t, base+"/mcp/plant_room")
	legacyTr, err := transport.NewStreamableHTTP(base+"/mcp/plant_room", transport.WithContinuousListening())
	if err != nil {
		t.Fatal(err)
	}
	legacy := client.NewClient(legacyTr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	start(t, legacy)
	told := map[*client.Client]chan struct{}{modern: make(chan struct{}, 4), legacy: make(chan struct{}, 4)}
	acked := make(chan struct{}, 1) // the modern client's listen stream is open
	for c, ch := range told {
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			switch n.Method {
			case string(mcp.MethodNotificationToolsListChanged):
				ch <- struct{}{}
			case mcp.MethodNotificationSubscriptionsAcknowledged:
				acked <- struct{}{}
			}
		})
		// twice: the second answer comes from the cache
		for range 2 {
			if names := toolNamesOf(t, c); !slices.Equal(names, []string{"can_do", "do_circulation_pump_speed", "read_circulation_pump_speed"}) {
				t.Fatalf("plant_room lists %v", names)
			}
		}
	}
	stop, err := modern.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(err error) { t.Errorf("listen: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select { // a change before it is lost to the modern client; the legacy one's is queued for its GET stream
	case <-acked:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/subscriptions/acknowledged")
	}

	adoptInto(t, e, "irrigation", siteSource(t, "irrigation"), "plant_room")
	for c, ch := range told {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no tools/list_changed (legacy client: %v)", c == legacy)
		}
		if names := toolNamesOf(t, c); !slices.Contains(names, "do_irrigation_valve") || !slices.Contains(names, "read_soil_moisture") {
			t.Errorf("plant_room after adopting the irrigation device lists %v", names)
		}
	}
	res, err := modern.ListResources(context.Background(), mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Resources, func(r mcp.Resource) bool { return r.URI == mcpserver.ReadingURI(m.Device.ID, "soil_moisture") }) {
		t.Errorf("no reading resource for the adopted soil_moisture: %v", res.Resources)
	}

	// a group that appears gets an endpoint of its own
	adoptInto(t, e, "climate", siteSource(t, "climate"), "greenhouse_a")
	opts.Group = "greenhouse_a"
	zone, err := mcpserver.New(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.Mount(mcpserver.Endpoint{Group: "greenhouse_a", Path: mcpserver.GroupPath("greenhouse_a"), Server: zone})
	if names := toolNamesOf(t, dialURL(t, base+"/mcp/greenhouse_a")); !slices.Equal(names, []string{"can_do", "do_vent_fan", "read_air_temperature", "read_vent_fan"}) {
		t.Errorf("greenhouse_a lists %v", names)
	}

	// a device no longer adopted leaves its group's list
	if err := e.Unadopt("irrigation"); err != nil {
		t.Fatal(err)
	}
	<-told[legacy]
	if names := toolNamesOf(t, legacy); slices.Contains(names, "read_soil_moisture") {
		t.Errorf("plant_room after the irrigation device left lists %v", names)
	}
}

func dialURL(t *testing.T, url string) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr)
	start(t, c)
	return c
}
