package meshadopt_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// members is a membership the test writes.
type members struct {
	mu    sync.Mutex
	peers []mesh.Peer
}

func (m *members) Self() mesh.Peer {
	return mesh.Peer{NodeID: "site_mesh_aggregator_01", DeviceID: "site_mesh_aggregator_01"}
}

func (m *members) Peers() []mesh.Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.peers)
}

func (m *members) Subscribe(int) (<-chan mesh.Event, func()) { return make(chan mesh.Event), func() {} }

func (m *members) set(peers ...mesh.Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = peers
}

func load(t *testing.T, dir string) (*manifest.Manifest, *policy.Policy) {
	t.Helper()
	m, diags := manifest.Load(dir + "/physmcp.manifest.yml")
	if m == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	p, diags := policy.Load(dir+"/physmcp.policy.yml", m)
	if p == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	return m, p
}

// simEngine serves m, its buses simulated but for its mcp buses (the
// aggregator's mesh source, which is never used itself).
func simEngine(t *testing.T, m *manifest.Manifest, p *policy.Policy) *engine.Engine {
	t.Helper()
	simulate := m.MeshSource() == nil
	buses, err := drivers.OpenAll(context.Background(), m, drivers.Openers{manifest.BusMCP: adopt.Open}, sim.Open, simulate)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// device serves an examples/mesh device over HTTP as serve does: its
// policy's authentication in front, mesh credentials signed with keys
// accepted. credentials receives the Authorization of every request.
func device(t *testing.T, name string, keys [][]byte, credentials chan<- string) string {
	t.Helper()
	url, _ := deviceAs(t, name, "", keys, credentials)
	return url
}

// deviceAs is device with the device id id ("": the example's), and its engine.
func deviceAs(t *testing.T, name, id string, keys [][]byte, credentials chan<- string) (string, *engine.Engine) {
	t.Helper()
	m, p := load(t, "../examples/mesh/"+name)
	if id != "" {
		m.Device.ID = id
	}
	return serveDevice(t, m, p, keys, credentials)
}

// serveDevice serves m under p over HTTP as device does, and returns its
// URL and engine.
func serveDevice(t *testing.T, m *manifest.Manifest, p *policy.Policy, keys [][]byte, credentials chan<- string) (string, *engine.Engine) {
	t.Helper()
	e := simEngine(t, m, p)
	s, err := mcpserver.New(e, mcpserver.Options{Logger: quiet, Caller: mcpserver.CallerFrom(engine.Caller{Identity: "local", Role: manifest.RoleNone})})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID, MeshKeys: keys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{{Path: mcpserver.EndpointPath, Server: s}}, quiet, mcpserver.SessionLimits{})
	protected := mcpserver.Protect(h, mcpserver.Access{Auth: a, Permits: mcpserver.RolePermits(e), Logger: quiet})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case credentials <- r.Header.Get("Authorization"):
		default:
		}
		protected.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		h.CloseSessions(context.Background())
		ts.Close()
	})
	return ts.URL + mcpserver.EndpointPath, e
}

// counting counts the adoptions it passes on.
type counting struct {
	*engine.Engine
	mu      sync.Mutex
	adopted map[string]int
}

func (c *counting) Adopt(src *manifest.Bus, b drivers.Bus, caps []*manifest.Capability, notServed []*manifest.NotServed) error {
	c.mu.Lock()
	c.adopted[src.Name]++
	c.mu.Unlock()
	return c.Engine.Adopt(src, b, caps, notServed)
}

func (c *counting) times(bus string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adopted[bus]
}

func served(e *engine.Engine) map[string]string {
	out := map[string]string{}
	for _, t := range e.Tools() {
		if t.Capability != nil {
			out[t.Name] = t.Capability.Group
		}
	}
	return out
}

// The mesh source adopts the devices the membership lists, into the group
// of their zone, calling them with a mesh credential for each; skips
// itself, aggregators and nodes without an endpoint; marks a dead device
// away (blocked, not called) and adopts it afresh when it is back; adopts a
// device again when its capabilities hash changes; and stops serving one
// the mesh forgot.
func TestAdoptsTheMembership(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	credentials := make(chan string, 256)
	greenhouseURL := device(t, "greenhouse", keys, credentials)
	weatherURL := device(t, "weather", keys, credentials)
	irrigationURL := device(t, "irrigation", keys, credentials)

	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := &counting{Engine: simEngine(t, m, p), adopted: map[string]int{}}
	membership := &members{}
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, membership, agg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	greenhouse := mesh.Peer{NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
		Endpoint: greenhouseURL, CapsHash: "h1", State: mesh.Alive, Since: now}
	weather := mesh.Peer{NodeID: "weather_station_01", DeviceID: "weather_station_01", Zone: "outdoor", Profile: "full",
		Endpoint: weatherURL, CapsHash: "w1", State: mesh.Alive, Since: now}
	membership.set(greenhouse, weather,
		mesh.Peer{NodeID: "site_mesh_aggregator_01", DeviceID: "site_mesh_aggregator_01", Profile: "aggregator", Endpoint: "http://127.0.0.1:9/mcp", State: mesh.Alive},
		mesh.Peer{NodeID: "other_aggregator", DeviceID: "other_aggregator", Profile: "aggregator", Endpoint: greenhouseURL, State: mesh.Alive},
		mesh.Peer{NodeID: "silent", DeviceID: "silent", Zone: "outdoor", State: mesh.Alive},
		// a zone that is no group name: not adopted (logged)
		mesh.Peer{NodeID: "irrigation_pump_01", DeviceID: "irrigation_pump_01", Zone: "Zone B", Endpoint: irrigationURL, State: mesh.Alive})
	a.Sync(ctx)

	want := map[string]string{"read_greenhouse_controller_01_air_temperature": "greenhouse_a", "do_greenhouse_controller_01_vent_fan": "greenhouse_a",
		"read_greenhouse_controller_01_vent_fan": "greenhouse_a", "read_weather_station_01_outdoor_temperature": "outdoor", "read_weather_station_01_rain_rate": "outdoor"}
	if got := served(agg.Engine); !maps.Equal(got, want) {
		t.Fatalf("served after the first sync: %v, want %v", got, want)
	}
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, "do_greenhouse_controller_01_vent_fan", promcp.DoRequest{Value: true, IdempotencyKey: "k1"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Fatalf("do_vent_fan through the mesh source: %+v %v", r, err)
	}
	checkCredentials(t, credentials)

	// dead: not called, blocked with the mesh's word
	greenhouse.State, greenhouse.Since = mesh.Dead, time.Now()
	membership.set(greenhouse, weather)
	a.Sync(ctx)
	rep, err := agg.CanDo(ctx, op, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Candidates) != 0 || len(rep.Blocked) == 0 || !strings.Contains(rep.Blocked[0].Reason, "greenhouse_controller_01 is dead in the mesh") {
		t.Errorf("can_do with the greenhouse controller dead: %+v", rep)
	}
	checkCredentials(t, credentials) // drains them
	if r, _ := agg.Do(ctx, op, "do_greenhouse_controller_01_vent_fan", promcp.DoRequest{Value: false, IdempotencyKey: "k2"}); r.Permission != promcp.SourceUnreachable || len(credentials) > 0 {
		t.Errorf("do_vent_fan with the device dead in the mesh: %+v, %d requests reached it; want source_unreachable and none", r, len(credentials))
	}

	// back: adopted afresh, answers again
	greenhouse.State = mesh.Alive
	membership.set(greenhouse, weather)
	a.Sync(ctx)
	if r, err := agg.Read(ctx, op, "read_greenhouse_controller_01_air_temperature"); err != nil || r.Quality != promcp.QualityGood {
		t.Errorf("read_air_temperature after the device came back: %+v %v", r, err)
	}
	if n := agg.times("devices/greenhouse_controller_01"); n != 2 {
		t.Errorf("the greenhouse controller adopted %d times, want 2 (at first, and when it came back)", n)
	}

	// a new capabilities hash: adopted again; the same: not
	a.Sync(ctx)
	greenhouse.CapsHash = "h2"
	membership.set(greenhouse, weather)
	a.Sync(ctx)
	if n := agg.times("devices/greenhouse_controller_01"); n != 3 {
		t.Errorf("the greenhouse controller adopted %d times after its hash changed, want 3", n)
	}

	// forgotten by the mesh: no longer served
	membership.set(greenhouse)
	a.Sync(ctx)
	if got := served(agg.Engine); got["read_weather_station_01_rain_rate"] != "" || got["read_greenhouse_controller_01_air_temperature"] != "greenhouse_a" {
		t.Errorf("served after the weather station was forgotten: %v", got)
	}
}

// checkCredentials: every request the devices received carried a mesh
// credential, for the device called, from the aggregator.
func checkCredentials(t *testing.T, credentials chan string) {
	t.Helper()
	for n := len(credentials); n > 0; n-- {
		header := <-credentials
		tok, ok := strings.CutPrefix(header, "Bearer ")
		claims := jwt.RegisteredClaims{}
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); !ok || err != nil {
			t.Fatalf("a request without a mesh credential: %q (%v)", header, err)
		}
		if claims.Issuer != auth.MeshIssuer || claims.Subject != "site_mesh_aggregator_01" || len(claims.Audience) != 1 {
			t.Errorf("credential claims %+v", claims)
		}
	}
}

// twoGreenhouses serves the examples/mesh greenhouse controller twice, as
// greenhouse_controller_01 and _02 (the same manifest, another device id),
// and returns their peers and engines by id.
func twoGreenhouses(t *testing.T, keys [][]byte) (map[string]mesh.Peer, map[string]*engine.Engine) {
	t.Helper()
	peers, engines := map[string]mesh.Peer{}, map[string]*engine.Engine{}
	for _, id := range []string{"greenhouse_controller_01", "greenhouse_controller_02"} {
		url, e := deviceAs(t, "greenhouse", id, keys, make(chan string))
		peers[id] = mesh.Peer{NodeID: id, DeviceID: id, Zone: "greenhouse_a", Profile: "full", Endpoint: url, CapsHash: "h", State: mesh.Alive, Since: time.Now()}
		engines[id] = e
	}
	return peers, engines
}

// answeredCanDo is agg's can_do once the devices' answers are in. can_do
// waits engine.AssessTimeout for a device, then reports it late; a loaded
// host can take longer, and the late answer (read or judgement) then stands
// for the next can_do (engine.LateAnswerTTL). A device that has not
// answered in that time stays blocked, and the caller's checks say so.
func answeredCanDo(t *testing.T, agg *engine.Engine, caller engine.Caller, req promcp.CanDoRequest) promcp.CapabilityReport {
	t.Helper()
	deadline := time.Now().Add(engine.LateAnswerTTL)
	for {
		rep, err := agg.CanDo(context.Background(), caller, req)
		if err != nil {
			t.Fatal(err)
		}
		late := slices.ContainsFunc(rep.Blocked, func(b promcp.Blocked) bool {
			return b.Permission == promcp.SourceUnreachable && strings.Contains(b.Reason, "no answer within can_do's")
		})
		if !late || time.Now().After(deadline) {
			return rep
		}
	}
}

// calls is how many calls of tool reached e, and how many of them e
// answered from its idempotency store.
func calls(e *engine.Engine, tool string) (calls, replays uint64) {
	for _, s := range e.Stats().Tools {
		if s.Tool == tool {
			return s.Calls, s.Replays
		}
	}
	return 0, 0
}

// Two identical devices (the same manifest, another device id) behind one
// aggregator over the mesh, under names: device_prefixed (the mesh source's default): both are
// served, each tool under its device's name, whichever joined first, and a
// do_ through each name acts once on its own device, with the caller's key.
func TestIdenticalDevicesServedApart(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	peers, devices := twoGreenhouses(t, keys)
	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := simEngine(t, m, p)
	membership := &members{}
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, membership, agg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	membership.set(peers["greenhouse_controller_02"]) // the higher id first
	a.Sync(ctx)
	membership.set(peers["greenhouse_controller_02"], peers["greenhouse_controller_01"])
	a.Sync(ctx)
	want := map[string]string{}
	for _, id := range []string{"greenhouse_controller_01", "greenhouse_controller_02"} {
		for _, tool := range []string{"read_%s_air_temperature", "read_%s_vent_fan", "do_%s_vent_fan"} {
			want[fmt.Sprintf(tool, id)] = "greenhouse_a"
		}
	}
	if got := served(agg); !maps.Equal(got, want) {
		t.Fatalf("served: %v, want %v", got, want)
	}

	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	for i, id := range []string{"greenhouse_controller_01", "greenhouse_controller_02"} {
		tool, k := "do_"+id+"_vent_fan", fmt.Sprintf("key-%d", i)
		for range 3 { // retried with one key: acts once
			if r, err := agg.Do(ctx, op, tool, promcp.DoRequest{Value: true, IdempotencyKey: k}); err != nil || r.Status != promcp.StatusSuccess {
				t.Fatalf("%s through the aggregator: %+v %v", tool, r, err)
			}
		}
		if n, _ := calls(devices[id], "do_vent_fan"); n != 1 {
			t.Errorf("%s: %d calls of do_vent_fan reached %s, want 1", tool, n, id)
		}
		// the device knows the caller's key: asked directly with it, it replays
		if r, err := devices[id].Do(ctx, op, "do_vent_fan", promcp.DoRequest{Value: true, IdempotencyKey: k}); err != nil || r.Status != promcp.StatusSuccess {
			t.Fatalf("do_vent_fan at %s with the caller's key: %+v %v", id, r, err)
		}
		if n, replays := calls(devices[id], "do_vent_fan"); n != 2 || replays != 1 {
			t.Errorf("%s: do_vent_fan with the caller's key again: %d calls, %d replays; want the second replayed", id, n, replays)
		}
		if r, err := devices[id].Read(ctx, op, "read_vent_fan"); err != nil || r.Value != true {
			t.Errorf("%s reads its fan %v %v after its do_, want true", id, r.Value, err)
		}
		if other := devices["greenhouse_controller_0"+strconv.Itoa(2-i)]; i == 0 {
			if r, _ := other.Read(ctx, op, "read_vent_fan"); r.Value != false {
				t.Errorf("greenhouse_controller_02's fan is %v after greenhouse_controller_01's do_; nothing was sent to it", r.Value)
			}
		}
	}
}

// Under names: as_is, two identical devices offer the same names: the
// device of the lower id serves them, whichever joined first, and the
// other's are blocked in can_do (physmcp:not_served, the reason naming the
// device that serves them) instead of missing; when the mesh forgets the
// first, the other takes the names over.
func TestIdenticalDevicesAsIsCollide(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	ctx := context.Background()
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	for _, order := range [][]string{{"greenhouse_controller_02", "greenhouse_controller_01"}, {"greenhouse_controller_01", "greenhouse_controller_02"}} {
		t.Run(order[0]+"_first", func(t *testing.T) {
			peers, devices := twoGreenhouses(t, keys)
			m, p := load(t, "../examples/site/mesh-aggregator")
			m.MeshSource().MCP.Adopt.Names = manifest.NamesAsIs
			agg := simEngine(t, m, p)
			membership := &members{}
			a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, membership, agg)
			if err != nil {
				t.Fatal(err)
			}
			membership.set(peers[order[0]])
			a.Sync(ctx)
			membership.set(peers[order[0]], peers[order[1]])
			a.Sync(ctx)
			if got := servedFrom(agg); len(got) != 3 || got["do_vent_fan"] != "devices/greenhouse_controller_01" || got["read_air_temperature"] != "devices/greenhouse_controller_01" {
				t.Fatalf("served: %v; want the three tools of greenhouse_controller_01", got)
			}
			rep := answeredCanDo(t, agg, op, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "set", Value: true}})
			if len(rep.Candidates) != 1 || rep.Candidates[0].Capability != "do_vent_fan" || rep.Candidates[0].AdoptedFrom.SourceAddress != peers["greenhouse_controller_01"].Endpoint {
				t.Errorf("can_do candidates: %+v; want greenhouse_controller_01's do_vent_fan", rep.Candidates)
			}
			if len(rep.Blocked) != 1 {
				t.Fatalf("can_do blocked: %+v; want greenhouse_controller_02's do_vent_fan", rep.Blocked)
			}
			b := rep.Blocked[0]
			wantReason := "name_collision: do_vent_fan of greenhouse_controller_02 is not served: greenhouse_controller_01 (first in device id order) serves that name"
			if b.Capability != "do_vent_fan" || b.Permission != promcp.NotServed || b.DeviceID != "greenhouse_controller_02" ||
				b.AdoptedFrom == nil || b.AdoptedFrom.SourceAddress != peers["greenhouse_controller_02"].Endpoint || !strings.HasPrefix(b.Reason, wantReason) {
				t.Errorf("blocked %+v; want do_vent_fan of greenhouse_controller_02, physmcp:not_served, %q", b, wantReason)
			}
			if r, err := agg.Do(ctx, op, "do_vent_fan", promcp.DoRequest{Value: true, IdempotencyKey: "as-is-" + order[0]}); err != nil || r.Status != promcp.StatusSuccess {
				t.Fatalf("do_vent_fan: %+v %v", r, err)
			}
			if n, _ := calls(devices["greenhouse_controller_02"], "do_vent_fan"); n != 0 {
				t.Errorf("%d calls of do_vent_fan reached greenhouse_controller_02, which does not serve the name", n)
			}

			// the first forgotten: the other takes its names over
			membership.set(peers["greenhouse_controller_02"])
			a.Sync(ctx)
			if got := servedFrom(agg); len(got) != 3 || got["do_vent_fan"] != "devices/greenhouse_controller_02" {
				t.Errorf("served once greenhouse_controller_01 is forgotten: %v; want greenhouse_controller_02's", got)
			}
			if rep := answeredCanDo(t, agg, op, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}}}); len(rep.Blocked) != 0 {
				t.Errorf("can_do blocked once greenhouse_controller_01 is forgotten: %+v", rep.Blocked)
			}
		})
	}
}

// servedFrom is the bus each read_* and do_* is served from.
func servedFrom(e *engine.Engine) map[string]string {
	out := map[string]string{}
	for _, t := range e.Tools() {
		if t.Capability != nil {
			out[t.Name] = t.Capability.Binding.Bus
		}
	}
	return out
}

// A name the aggregator serves itself (its manifest's capability) stays
// its own: a device of the mesh offering it under names: as_is is adopted
// without it, blocked as not served.
func TestDeviceNameTakenByTheAggregator(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	url := device(t, "greenhouse", keys, make(chan string))
	dir := t.TempDir()
	text, err := os.ReadFile("../examples/site/mesh-aggregator/physmcp.manifest.yml")
	if err != nil {
		t.Fatal(err)
	}
	own := strings.Replace(string(text), "capabilities: []\n", `  mast: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: air_temperature
    kind: read
    description: Air temperature at the site's weather mast.
    binding: {bus: mast, address: "0x48:reg=0x00:width=2:byte_order=big:signed=true:shift=4:scale=0.0625"}
    data_type: float
    unit: "°C"
    semantic_tags: [temperature, air]
    group: mast
`, 1)
	own = strings.Replace(own, "names: device_prefixed", "names: as_is", 1)
	own = strings.Replace(own, "key_file: ../../mesh/mesh.key", "key_file: "+filepath.Join(dir, "mesh.key"), 1)
	for name, data := range map[string]string{"physmcp.manifest.yml": own, "mesh.key": string(key)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := os.ReadFile("../examples/site/mesh-aggregator/physmcp.policy.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "physmcp.policy.yml"), policy, 0o600); err != nil {
		t.Fatal(err)
	}
	m, p := load(t, dir)
	agg := simEngine(t, m, p)
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet},
		&members{peers: []mesh.Peer{{NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
			Endpoint: url, CapsHash: "h", State: mesh.Alive, Since: time.Now()}}}, agg)
	if err != nil {
		t.Fatal(err)
	}
	a.Sync(context.Background())
	if got := servedFrom(agg); got["read_air_temperature"] != "mast" || got["do_vent_fan"] != "devices/greenhouse_controller_01" {
		t.Fatalf("served: %v; want read_air_temperature the aggregator's own, the device's fan adopted", got)
	}
	rep, err := agg.CanDo(context.Background(), engine.Caller{Identity: "op", Role: manifest.RoleOperator},
		promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"temperature"}, Action: "read"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "name_collision: read_air_temperature of greenhouse_controller_01 is not served: the aggregator itself (its manifest, or a source it lists) serves that name"
	if len(rep.Candidates) != 1 || rep.Candidates[0].AdoptedFrom != nil || len(rep.Blocked) != 1 || rep.Blocked[0].Permission != promcp.NotServed ||
		!strings.HasPrefix(rep.Blocked[0].Reason, want) {
		t.Errorf("can_do: candidates %+v, blocked %+v; want the aggregator's own reading and the device's blocked: %q", rep.Candidates, rep.Blocked, want)
	}
}
