//go:build !lite

package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

const (
	tankManifest = "testdata/resources/physmcp.manifest.yml"
	tankPolicy   = "testdata/resources/physmcp.policy.yml"
	levelURI     = "physmcp://tank_test_01/readings/level"
	pressureURI  = "physmcp://tank_test_01/readings/pressure"
	tankURI      = "physmcp://tank_test_01/device"
)

// tank is the resources test device, served to callers of one role. Its
// clock stands still unless a test moves it, so cache ages and the minimum
// interval between updates do not depend on how fast the machine runs.
type tank struct {
	e   *engine.Engine
	s   *server.MCPServer
	clk *testclock.Clock
	bus interface {
		SetValue(capability string, v any) error
	}
}

func startTank(t *testing.T, role manifest.Role) *tank {
	t.Helper()
	m, p := loadDevice(t, tankManifest, tankPolicy)
	d := &tank{clk: testclock.New(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: d.clk.Now}), true)
	if err != nil {
		t.Fatal(err)
	}
	d.bus = buses["mb"].(interface {
		SetValue(capability string, v any) error
	})
	d.e, err = engine.New(m, p, buses, engine.Options{Now: d.clk.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.e.Close() })
	caller := engine.Caller{Identity: "test", Role: role}
	s, err := mcpserver.New(d.e, mcpserver.Options{Version: "test", Logger: quietLogger(), Now: d.clk.Now,
		Caller: func(context.Context) engine.Caller { return caller }})
	if err != nil {
		t.Fatal(err)
	}
	d.s = s
	return d
}

// set moves the clock 120 ms on (past the 100 ms cache TTL), changes the
// level on the device and has an ordinary read see it: whether the read or
// a poll sees the change first, it is seen at one time of the clock.
//
// A reading of the old level stamped after the clock moved would be served
// as fresh by that read (it once was, under load). So set reads first: that
// read returns once any read of the device under way has ended, and leaves
// a reading of this instant cached (the tests move the clock 1 s or more
// between sets, or not at all), which the watcher's polls reuse while it is
// younger than half their 300 ms period: 120 ms on, none reads the device.
func (d *tank) set(t *testing.T, c *client.Client, v float64) {
	t.Helper()
	readLevel(t, c)
	d.clk.Advance(120 * time.Millisecond)
	if err := d.bus.SetValue("level", v); err != nil {
		t.Fatal(err)
	}
	if got := readLevel(t, c); got != v {
		t.Fatalf("read_level %v after setting %v", got, v)
	}
}

func readLevel(t *testing.T, c *client.Client) any {
	t.Helper()
	res, err := c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "read_level"}})
	if err != nil {
		t.Fatal(err)
	}
	return res.StructuredContent.(map[string]any)["value"]
}

var rawID atomic.Int64

// request sends a request mcp-go's client has no method for.
func request(c *client.Client, method string, params any) (json.RawMessage, error) {
	resp, err := c.GetTransport().SendRequest(context.Background(), transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(1_000_000 + rawID.Add(1)), Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error.AsError()
	}
	return resp.Result, nil
}

func subscribe(c *client.Client, uri string) error {
	_, err := request(c, string(mcp.MethodResourcesSubscribe), map[string]any{"uri": uri})
	return err
}

// updates collects the client's notifications/resources/updated.
func updates(c *client.Client) <-chan mcp.JSONRPCNotification {
	ch := make(chan mcp.JSONRPCNotification, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationResourceUpdated) {
			ch <- n
		}
	})
	return ch
}

// nextUpdate waits for an update of uri and returns the reading it carries.
func nextUpdate(t *testing.T, ch <-chan mcp.JSONRPCNotification, uri string) map[string]any {
	t.Helper()
	select {
	case n := <-ch:
		// As the client's JSON has it (in process it is the server's value).
		raw, err := json.Marshal(n.Params)
		if err != nil {
			t.Fatal(err)
		}
		var params struct {
			URI  string `json:"uri"`
			Meta struct {
				Reading map[string]any `json:"physmcp/reading"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(raw, &params); err != nil {
			t.Fatal(err)
		}
		if params.URI != uri {
			t.Fatalf("update of %v, want %s", params.URI, uri)
		}
		r := params.Meta.Reading
		if r == nil {
			t.Fatalf("update without %s in _meta: %s", mcpserver.MetaReading, raw)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/resources/updated within 5 s")
	}
	panic("unreachable")
}

// noUpdate fails on any update within d (two poll periods of the level).
func noUpdate(t *testing.T, ch <-chan mcp.JSONRPCNotification, d time.Duration, why string) {
	t.Helper()
	select {
	case n := <-ch:
		t.Fatalf("%s: unexpected update %+v", why, n.Params)
	case <-time.After(d):
	}
}

func waitWatches(t *testing.T, e *engine.Engine, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.Watches() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches, want %d", e.Watches(), want)
		}
	}
}

func TestResourcesListAndRead(t *testing.T) {
	for _, tc := range []struct {
		role    manifest.Role
		uris    []string
		readers []string
	}{
		{manifest.RoleSupervisor, []string{tankURI, levelURI, pressureURI}, []string{"level", "pressure"}},
		{manifest.RoleViewer, []string{tankURI, levelURI}, []string{"level"}},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			d := startTank(t, tc.role)
			c := inProcessClient(t, d.s)
			ctx := context.Background()
			list, err := c.ListResources(ctx, mcp.ListResourcesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var uris []string
			for _, r := range list.Resources {
				uris = append(uris, r.URI)
				if r.MIMEType != "application/json" {
					t.Errorf("%s: MIME type %q", r.URI, r.MIMEType)
				}
			}
			slices.Sort(uris)
			want := slices.Sorted(slices.Values(tc.uris))
			if !slices.Equal(uris, want) {
				t.Errorf("resources %v, want %v", uris, want)
			}

			// A reading resource answers what read_* answers.
			res, err := c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: levelURI}})
			if err != nil {
				t.Fatal(err)
			}
			text := res.Contents[0].(mcp.TextResourceContents)
			var body map[string]any
			if err := json.Unmarshal([]byte(text.Text), &body); err != nil {
				t.Fatal(err)
			}
			if body["value"] != 10.0 || body["unit"] != "cm" || body["quality"] != "good" || body["device_id"] != "tank_test_01" || body["timestamp"] == nil {
				t.Errorf("reading %s", text.Text)
			}

			res, err = c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: tankURI}})
			if err != nil {
				t.Fatal(err)
			}
			var dev mcpserver.DeviceSummary
			if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &dev); err != nil {
				t.Fatal(err)
			}
			var readers []string
			for _, c := range dev.Capabilities {
				if c.Resource != "" {
					readers = append(readers, c.Name)
				}
			}
			if dev.DeviceID != "tank_test_01" || dev.Location == nil || dev.Location.Zone != "plant" || dev.Profile != "full" || !slices.Equal(readers, tc.readers) {
				t.Errorf("device %+v", dev)
			}

			// What the role may not read, it may neither read nor subscribe to.
			_, readErr := c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: pressureURI}})
			subErr := subscribe(c, pressureURI)
			if tc.role == manifest.RoleViewer {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a listen that is not refused lasts
				listenErr := c.Listen(lctx, mcp.SubscriptionFilter{ResourceSubscriptions: []string{levelURI, pressureURI}})
				cancel()
				for _, err := range []error{readErr, subErr, listenErr} {
					if err == nil || !strings.Contains(err.Error(), "read_pressure, which role viewer may not call") {
						t.Errorf("viewer on the pressure: %v", err)
					}
				}
				if n := d.e.Watches(); n != 0 {
					t.Errorf("%d watches after a refused subscription", n)
				}
			} else if readErr != nil || subErr != nil {
				t.Errorf("supervisor on the pressure: %v, %v", readErr, subErr)
			}
			if err := subscribe(c, "physmcp://tank_test_01/readings/nothing"); err == nil || !strings.Contains(err.Error(), "no resource physmcp://tank_test_01/readings/nothing") {
				t.Errorf("subscribing to an unknown reading: %v", err)
			}
		})
	}
}

// subscriber subscribes a client to a reading; unsubscribe ends it.
type subscriber func(t *testing.T, c *client.Client, uri string) (unsubscribe func())

// legacySubscribe uses resources/subscribe and resources/unsubscribe.
func legacySubscribe(t *testing.T, c *client.Client, uri string) func() {
	t.Helper()
	if err := subscribe(c, uri); err != nil {
		t.Fatal(err)
	}
	if err := subscribe(c, uri); err != nil { // a second time is a no-op
		t.Fatal(err)
	}
	return func() {
		if _, err := request(c, string(mcp.MethodResourcesUnsubscribe), map[string]any{"uri": uri}); err != nil {
			t.Fatal(err)
		}
	}
}

// listenSubscribe opens a subscriptions/listen stream (protocol 2026-07-28)
// naming the reading; closing the stream ends it.
//
// It returns once the server has acknowledged the stream, which it does
// after the watch took its first reading: the engine counts a watch before
// that reading, and one taken while a test changes the level would make the
// changed level its baseline (or be served as the level after the change).
func listenSubscribe(t *testing.T, c *client.Client, uri string) func() {
	t.Helper()
	acked := make(chan struct{}, 1)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == mcp.MethodNotificationSubscriptionsAcknowledged {
			select {
			case acked <- struct{}{}:
			default: // a later stream's, for an earlier call's handler
			}
		}
	})
	stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{uri}},
		func(err error) { t.Logf("subscriptions/listen ended: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-acked:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/subscriptions/acknowledged within 5 s")
	}
	return stop
}

func httpConnect(t *testing.T, s *server.MCPServer, topts []transport.StreamableHTTPCOption, copts ...client.ClientOption) *client.Client {
	t.Helper()
	ts := httptest.NewServer(mcpserver.NewHTTPHandler(s, quietLogger()))
	t.Cleanup(ts.Close)
	tr, err := transport.NewStreamableHTTP(ts.URL+mcpserver.EndpointPath, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, copts...)
	start(t, c)
	return c
}

// transports serve the tank to a client in process, over HTTP with the
// session's GET stream open (protocol 2025-11-25 and before), and over HTTP
// without sessions (2026-07-28, subscriptions/listen).
var transports = []struct {
	name      string
	connect   func(t *testing.T, s *server.MCPServer) *client.Client
	subscribe subscriber
}{
	{"in-process", func(t *testing.T, s *server.MCPServer) *client.Client { return inProcessClient(t, s) }, legacySubscribe},
	{"http", func(t *testing.T, s *server.MCPServer) *client.Client {
		return httpConnect(t, s, []transport.StreamableHTTPCOption{transport.WithContinuousListening()})
	}, legacySubscribe},
	{"http 2026-07-28", func(t *testing.T, s *server.MCPServer) *client.Client { return httpConnect(t, s, nil) }, listenSubscribe},
}

func TestResourceSubscription(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			d := startTank(t, manifest.RoleOperator)
			c := tr.connect(t, d.s)
			ch := updates(c)
			unsubscribe := tr.subscribe(t, c, levelURI)
			waitWatches(t, d.e, 1)

			// The deadband is 1 cm: 10 -> 10.5 is no change, 10 -> 12 is one.
			d.set(t, c, 10.5)
			noUpdate(t, ch, 700*time.Millisecond, "10.5 is within the deadband of 10")
			d.set(t, c, 12)
			if r := nextUpdate(t, ch, levelURI); r["value"] != 12.0 || r["quality"] != "good" || r["unit"] != "cm" {
				t.Fatalf("update %v, want 12 cm, good", r)
			}
			noUpdate(t, ch, 700*time.Millisecond, "one change, one update")

			// At most one update per 300 ms (min_update_interval_ms) as the
			// server sends them, by its clock: a change right after one is
			// held until the interval ends. (When the client hears of them
			// is not the server's to promise: a loaded machine delays the
			// first more than the second.)
			d.clk.Advance(time.Second) // the interval since 12 has ended
			d.set(t, c, 20)            // sent at once, at S
			if r := nextUpdate(t, ch, levelURI); r["value"] != 20.0 {
				t.Fatalf("update %v, want 20", r["value"])
			}
			d.set(t, c, 30) // S+120 ms
			noUpdate(t, ch, 300*time.Millisecond, "30 came 120 ms after 20")
			d.clk.Advance(179 * time.Millisecond) // a poll sees 30 again
			noUpdate(t, ch, 300*time.Millisecond, "299 ms after 20")
			d.clk.Advance(time.Millisecond)
			if r := nextUpdate(t, ch, levelURI); r["value"] != 30.0 {
				t.Fatalf("update %v, want 30 once 300 ms had passed", r["value"])
			}

			// Unsubscribing stops them.
			unsubscribe()
			waitWatches(t, d.e, 0)
			d.set(t, c, 40)
			noUpdate(t, ch, 700*time.Millisecond, "after unsubscribe")

			// The session's end ends its subscriptions.
			tr.subscribe(t, c, levelURI)
			waitWatches(t, d.e, 1)
			c.Close()
			waitWatches(t, d.e, 0)
		})
	}
}

// An HTTP session released by the idle reaper frees its watches too.
func TestResourceSubscriptionIdleSession(t *testing.T) {
	d := startTank(t, manifest.RoleOperator)
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{{Path: mcpserver.EndpointPath, Server: d.s}}, quietLogger(),
		mcpserver.SessionLimits{IdleTimeout: 200 * time.Millisecond})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	tr, err := transport.NewStreamableHTTP(ts.URL + mcpserver.EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithLegacyProtocolOnly())
	start(t, c)
	if err := subscribe(c, levelURI); err != nil {
		t.Fatal(err)
	}
	waitWatches(t, d.e, 1)
	waitWatches(t, d.e, 0) // no request for 200 ms: released within 250 ms more
}

// Each session may hold MaxSubscriptionsPerSession subscriptions; this
// device has fewer readings, so the bound is checked through the engine's.
func TestSubscriptionErrorsNameTheResource(t *testing.T) {
	d := startTank(t, manifest.RoleSupervisor)
	c := inProcessClient(t, d.s)
	for i := range engine.MaxWatches {
		w, err := d.e.Watch(context.Background(), engine.Caller{Role: manifest.RoleAdmin}, "read_pressure", engine.WatchOptions{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		defer w.Stop()
	}
	err := subscribe(c, levelURI)
	if err == nil || !strings.Contains(err.Error(), levelURI) || !strings.Contains(err.Error(), fmt.Sprint(engine.MaxWatches)) {
		t.Errorf("subscribing past the engine's bound: %v", err)
	}
}
