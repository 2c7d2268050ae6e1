//go:build !lite

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

const meshExampleDir = "../../examples/mesh"

// meshTimingRE matches the keys a test manifest sets itself.
var meshTimingRE = regexp.MustCompile(`(?m)^[ \t]+(mdns|heartbeat_interval_ms|bind_port): .*\n`)

// meshExample is an example's manifest for a test, written to dir: the
// test's own keyring, no mDNS (no other test's mesh can merge with it),
// heartbeat hb, gossip on port (0: a free one), seed as its seed peer.
func meshExample(t testing.TB, dir, path string, port int, seed string, hb time.Duration) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := meshTimingRE.ReplaceAllString(string(data), "")
	text = regexp.MustCompile(`key_file: \S+`).ReplaceAllString(text, fmt.Sprintf("key_file: mesh.key\n    mdns: false\n    heartbeat_interval_ms: %d\n    bind_port: %d", hb.Milliseconds(), port))
	text = strings.ReplaceAll(text, "127.0.0.1:7951", seed)
	name := filepath.Base(filepath.Dir(path)) + ".manifest.yml"
	return writeFile(t, dir, name, text)
}

// meshDevice is one examples/mesh device served as a process.
type meshDevice struct {
	name, manifest, policy, state string
	endpoint, gossip              string
	cmd                           *exec.Cmd
	log                           *serveLogBuffer
}

// start serves the device on addr (127.0.0.1:0 for a free port) and waits
// for its endpoint and gossip address.
func (d *meshDevice) start(t *testing.T, bin, addr string) {
	t.Helper()
	args := []string{"serve", "--manifest", d.manifest, "--policy", d.policy, "--simulate", "--http", addr}
	if d.state != "" {
		args = append(args, "--state-dir", d.state)
	}
	d.log, d.cmd = startCommand(t, bin, args...)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		text := d.log.String()
		if m, g := listeningRE.FindStringSubmatch(text), gossipRE.FindStringSubmatch(text); m != nil && g != nil {
			d.endpoint, d.gossip = m[1], g[1]
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not start:\n%s", d.name, text)
		}
	}
}

// listNames is the tool names an endpoint lists, nil when it cannot be
// reached (yet).
func listNames(c *client.Client) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return nil
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	return names
}

// within polls f every 20 ms until it holds or limit passes, and returns
// how long that took.
func within(t *testing.T, limit time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// The site over the mesh: an aggregator with a mesh source joins the mesh
// of the examples/mesh devices (real processes, heartbeat 300 ms) and
// learns them from the membership. A device that joins appears in the
// group of its zone under its device's names (read_<device id>_<name>: the
// mesh source's default), its sessions told tools/list_changed; a new zone gets
// its endpoint, every endpoint passes lint --strict, a do_ reaches the
// owning device once with the caller's key however often it is retried, a
// SIGKILLed device is blocked as device_offline in the site's can_do and
// comes back when it returns.
func TestAggregatorOverTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs four processes")
	}
	const hb = 300 * time.Millisecond
	full := buildBinary(t, "")
	dir := meshDir(t)
	devices := map[string]*meshDevice{}
	for _, name := range []string{"greenhouse", "irrigation", "weather"} {
		devices[name] = &meshDevice{name: name, policy: filepath.Join(meshExampleDir, name, "physmcp.policy.yml")}
	}
	greenhouse, irrigation, weather := devices["greenhouse"], devices["irrigation"], devices["weather"]
	greenhouse.state = filepath.Join(dir, "greenhouse-state") // its audit trail shows what it did
	greenhouse.manifest = meshExample(t, dir, filepath.Join(meshExampleDir, "greenhouse", "physmcp.manifest.yml"), 0, "", hb)
	greenhouse.start(t, full, "127.0.0.1:0")
	for _, d := range []*meshDevice{irrigation, weather} {
		d.manifest = meshExample(t, dir, filepath.Join(meshExampleDir, d.name, "physmcp.manifest.yml"), 0, greenhouse.gossip, hb)
	}

	aggManifest := meshExample(t, dir, filepath.Join(siteDir, "mesh-aggregator", "physmcp.manifest.yml"), 0, greenhouse.gossip, hb)
	aggLog, _ := startCommand(t, full, "serve", "--manifest", aggManifest, "--policy", filepath.Join(siteDir, "mesh-aggregator", "physmcp.policy.yml"),
		"--simulate", "--http", "127.0.0.1:0")
	var base string
	within(t, 20*time.Second, "the aggregator listening", func() bool {
		if m := listeningRE.FindStringSubmatch(aggLog.String()); m != nil {
			base = strings.TrimSuffix(m[1], "/mcp")
		}
		return base != ""
	})
	endpoint := func(group string) *client.Client { return dialMCP(t, mustHTTP(t, base+"/mcp/"+group)) }

	// the greenhouse controller, there before the aggregator: adopted at start
	var zoneA *client.Client
	within(t, 10*time.Second, "greenhouse_a served", func() bool {
		if !strings.Contains(aggLog.String(), `endpoint added" group=greenhouse_a`) {
			return false
		}
		zoneA = endpoint("greenhouse_a")
		return slices.Contains(listNames(zoneA), "do_greenhouse_controller_01_vent_fan")
	})
	// Clients of both protocol eras are told: a 2026-07-28 one on its
	// subscriptions/listen stream, an older one on its session's GET stream.
	// Each waits until its stream is open: the server acknowledged the
	// subscription, or answered the GET.
	listening := listChanges(t, zoneA, true)
	tr, getOpen := legacyTransport(t, base+"/mcp/greenhouse_a")
	legacy := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	legacyChanged := listChanges(t, initialized(t, legacy), false)
	select {
	case <-getOpen:
	case <-time.After(20 * time.Second):
		t.Fatal("the legacy client's GET stream did not open within 20 s")
	}

	// a device joins the zone: the open sessions are told, and list its tools
	joined := time.Now()
	irrigation.start(t, full, "127.0.0.1:0")
	for _, ch := range []<-chan struct{}{listening, legacyChanged} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no tools/list_changed within 10 s of the irrigation device's start:\n%s", aggLog.String())
		}
	}
	t.Logf("device start → the sessions of its zone told tools/list_changed: %v", time.Since(joined).Round(time.Millisecond))
	for _, c := range []*client.Client{zoneA, legacy} {
		if names := listNames(c); !slices.Contains(names, "do_irrigation_pump_01_irrigation_pump") || !slices.Contains(names, "read_irrigation_pump_01_soil_moisture") {
			t.Fatalf("greenhouse_a after the irrigation device joined: %v", names)
		}
	}

	// a device of a new zone: its group's endpoint appears
	joined = time.Now()
	weather.start(t, full, "127.0.0.1:0")
	took := within(t, 10*time.Second, "the outdoor endpoint", func() bool {
		return strings.Contains(aggLog.String(), `endpoint added" group=outdoor`) && slices.Contains(listNames(endpoint("outdoor")), "read_weather_station_01_rain_rate")
	})
	t.Logf("device of a new zone start → its endpoint serves its tools: %v", took.Round(time.Millisecond)+time.Since(joined.Add(took)).Round(time.Millisecond))

	for _, p := range []string{"", "/greenhouse_a", "/outdoor"} {
		var out bytes.Buffer
		code := runLint([]string{"--strict", "--url", base + "/mcp" + p, "--header", "Authorization: Bearer " + operatorToken}, &out, &out)
		if code != 0 || !strings.Contains(out.String(), "static + live") || !strings.Contains(out.String(), "0 error(s), 0 warning(s)") {
			t.Errorf("lint --strict --url %s: exit %d:\n%s", p, code, out.String())
		}
	}

	// a do_ through the aggregator reaches the owning device once, with the
	// caller's key, however often it is retried
	const key = "5a0e4d2c-1b7f-4e3a-9c8d-6f2e1a0b3c4d"
	do := map[string]any{"value": true, "idempotency_key": key}
	for i := range 5 {
		if got := toolJSON(t, zoneA, "do_greenhouse_controller_01_vent_fan", do); got["status"] != "success" || got["applied_value"] != true || got["idempotency_key"] != key {
			t.Fatalf("do_vent_fan through the aggregator, call %d: %v", i+1, got)
		}
	}
	if got := toolJSON(t, dialNode(t, greenhouse.endpoint), "read_vent_fan", nil); got["value"] != true {
		t.Errorf("the greenhouse controller reads %v after the aggregator's do, want true", got)
	}
	if got := auditOutcomes(t, greenhouse.state, "do_vent_fan"); got[engine.OutcomeApplied] != 1 || got["key "+key] != got[engine.OutcomeApplied]+got[engine.OutcomeReplayed] {
		t.Errorf("the greenhouse controller's audit trail: %v; want one applied write, every call with the caller's key", got)
	}

	// SIGKILL: blocked as device_offline in the site's can_do, at once (its
	// connection is refused) and then because the mesh lists it dead
	site := dialMCP(t, mustHTTP(t, base+"/mcp"))
	intent := map[string]any{"intent": map[string]any{"semantic_tags": []string{"irrigation", "pump"}, "action": "set", "value": true}}
	if rep := siteCanDo(t, site, intent); findCandidate(rep, "do_irrigation_pump_01_irrigation_pump") == nil {
		t.Fatalf("site can_do before the kill: %+v; want do_irrigation_pump a candidate", rep)
	}
	killed := time.Now()
	if err := irrigation.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	irrigation.cmd.Wait()
	var reason string
	var last promcp.CapabilityReport
	defer func() {
		if t.Failed() {
			t.Logf("the site's latest can_do: %+v", last)
		}
	}()
	blocked := func(why string) func() bool {
		return func() bool {
			rep := siteCanDo(t, site, intent)
			last = rep
			b := findBlocked(rep, "do_irrigation_pump_01_irrigation_pump")
			if b == nil || b.Permission != promcp.SourceUnreachable || !strings.HasPrefix(b.Reason, "device_offline: ") || !strings.Contains(b.Reason, why) {
				return false
			}
			reason = b.Reason
			return true
		}
	}
	toBlocked := within(t, 5*time.Second, "do_irrigation_pump blocked after the kill", blocked(""))
	t.Logf("SIGKILL → blocked in the site's can_do: %v (%s)", toBlocked.Round(time.Millisecond), reason)
	within(t, 10*hb+5*time.Second, "the mesh's word in the site's can_do", blocked("dead in the mesh"))
	t.Logf("SIGKILL → blocked as dead in the mesh: %v (%s)", time.Since(killed).Round(time.Millisecond), reason)
	// its reading too, though the aggregator has a good one cached: the
	// mesh says the device is gone
	soil := siteCanDo(t, site, map[string]any{"intent": map[string]any{"semantic_tags": []string{"soil", "moisture"}}})
	if b := findBlocked(soil, "read_irrigation_pump_01_soil_moisture"); b == nil || b.Permission != promcp.SourceUnreachable || !strings.Contains(b.Reason, "dead in the mesh") {
		t.Errorf("site can_do for the dead device's reading: %+v; want read_soil_moisture blocked, dead in the mesh", soil)
	}

	// it returns, at the same addresses: a candidate again
	_, gossipPort, _ := strings.Cut(irrigation.gossip, ":")
	port, err := strconv.Atoi(gossipPort)
	if err != nil {
		t.Fatal(err)
	}
	irrigation.manifest = meshExample(t, dir, filepath.Join(meshExampleDir, "irrigation", "physmcp.manifest.yml"), port, greenhouse.gossip, hb)
	returned := time.Now()
	irrigation.start(t, full, strings.TrimSuffix(strings.TrimPrefix(irrigation.endpoint, "http://"), "/mcp"))
	within(t, 10*time.Second, "do_irrigation_pump a candidate again", func() bool {
		c := findCandidate(siteCanDo(t, site, intent), "do_irrigation_pump_01_irrigation_pump")
		return c != nil && c.Permission == promcp.Allowed
	})
	t.Logf("restart → a candidate again in the site's can_do: %v", time.Since(returned).Round(time.Millisecond))
	if got := toolJSON(t, zoneA, "read_irrigation_pump_01_soil_moisture", nil); got["quality"] != "good" {
		t.Errorf("read_soil_moisture through the aggregator after the return: %v", got)
	}
}

// listChanges reports c's notifications/tools/list_changed, opting in on a
// subscriptions/listen stream when listen is set (protocol 2026-07-28).
func listChanges(t *testing.T, c *client.Client, listen bool) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 8)
	acked := make(chan struct{}, 1)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		switch n.Method {
		case string(mcp.MethodNotificationToolsListChanged):
			ch <- struct{}{}
		case mcp.MethodNotificationSubscriptionsAcknowledged:
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	})
	if listen {
		stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(err error) { t.Errorf("listen: %v", err) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		// The server sends the acknowledgement once the stream takes
		// broadcasts; one sent before would be lost.
		select {
		case <-acked:
		case <-time.After(20 * time.Second):
			t.Fatal("subscriptions/listen not acknowledged within 20 s")
		}
	}
	return ch
}

// legacyTransport is an operator's transport that keeps a GET stream open
// for the server's notifications (protocols before 2026-07-28). The channel
// is closed when the server first answers that GET with its stream.
func legacyTransport(t *testing.T, url string) (*transport.StreamableHTTP, <-chan struct{}) {
	t.Helper()
	open := &getStreamOpen{RoundTripper: http.DefaultTransport, open: make(chan struct{})}
	tr, err := transport.NewStreamableHTTP(url, transport.WithContinuousListening(), transport.WithHTTPBasicClient(&http.Client{Transport: open}),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + operatorToken}))
	if err != nil {
		t.Fatal(err)
	}
	return tr, open.open
}

// getStreamOpen closes open when a GET is answered 200 as an event stream:
// mcp-go's server writes those headers once the stream is served.
type getStreamOpen struct {
	http.RoundTripper
	once sync.Once
	open chan struct{}
}

func (g *getStreamOpen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.RoundTripper.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		g.once.Do(func() { close(g.open) })
	}
	return resp, err
}

// initialized starts c and runs initialize.
func initialized(t *testing.T, c *client.Client) *client.Client {
	t.Helper()
	// Start's context is the GET stream's: it must outlive this call.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "mesh-aggregator-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func siteCanDo(t *testing.T, c *client.Client, args map[string]any) promcp.CapabilityReport {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Arguments = args
	rep, res := canDo(t, c, req)
	if res.IsError {
		t.Fatalf("site can_do: %v", res.Content)
	}
	return rep
}

func findCandidate(rep promcp.CapabilityReport, tool string) *promcp.Candidate {
	for i := range rep.Candidates {
		if rep.Candidates[i].Capability == tool {
			return &rep.Candidates[i]
		}
	}
	return nil
}

func findBlocked(rep promcp.CapabilityReport, tool string) *promcp.Blocked {
	for i := range rep.Blocked {
		if rep.Blocked[i].Capability == tool {
			return &rep.Blocked[i]
		}
	}
	return nil
}

// A mesh source is the aggregator's: serve refuses it under another profile
// before it listens or joins the mesh.
func TestMeshSourceNeedsTheAggregatorProfile(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"serve", "--manifest", filepath.Join(siteDir, "mesh-aggregator", "physmcp.manifest.yml"),
		"--policy", filepath.Join(siteDir, "mesh-aggregator", "physmcp.policy.yml"), "--profile", "full", "--simulate", "--http", "127.0.0.1:0"}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "a mesh source (mesh: true) is the aggregator's") || strings.Contains(stderr.String(), "listening") {
		t.Errorf("serve --profile full with a mesh source: exit %d:\n%s", code, stderr.String())
	}
}
