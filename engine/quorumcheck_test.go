package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// A pump room: the door switch is adopted from another node (so its reading
// can be good, stale, degraded or missing), the tank level is on this
// device's own I2C bus.
const pumpRoomManifest = `physmcp_version: "0.1"
device: {id: pump_room_01, type: pump_room, location: {zone: plant}}
buses:
  door_node: {type: mcp, url: "http://127.0.0.1:9/mcp"}
  i2c1: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: door_closed
    kind: read
    description: The pump room door is closed.
    binding: {bus: door_node, type: virtual, tool: read_door_closed}
    data_type: bool
    semantic_tags: [door]
  - name: tank_level
    kind: read
    description: Tank level.
    binding: {bus: i2c1, address: "0x36:reg=0x0f:width=2:byte_order=big:scale=0.1"}
    data_type: float
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [tank, level]
    cache_ttl_ms: 60000
    simulation: {initial: 50}
`

const pumpRoomPolicy = `physmcp_policy_version: "0.1"
time_windows:
  noon: {start: "11:00", end: "13:00", timezone: UTC}
quorum_checks:
  pump_area_clear:
    conditions:
      - {capability: read_door_closed, op: "==", value: true}
      - {capability: tank_level, op: ">=", value: 20, reason: "tank too low to prime"}
  not_at_noon:
    deny_during: [noon]
`

// doorPoint is the adopted door switch: what its next read answers.
type doorPoint struct {
	mu     sync.Mutex
	sample drivers.Sample
	err    error
	reads  int
}

func (p *doorPoint) set(s drivers.Sample, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sample, p.err = s, err
}

func (p *doorPoint) Read(context.Context) (drivers.Sample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	return p.sample, p.err
}
func (p *doorPoint) Write(context.Context, drivers.Value) error      { return drivers.ErrNotWritable }
func (p *doorPoint) Quantise(v drivers.Value) (drivers.Value, error) { return v, nil }
func (p *doorPoint) Describe() string                                { return "door_node tool read_door_closed" }

// doorBus serves the one adopted point.
type doorBus struct{ door *doorPoint }

func (b doorBus) Describe() string { return "mcp door node" }
func (b doorBus) Close() error     { return nil }
func (b doorBus) BindVirtual(*manifest.Capability, drivers.BindOptions) (drivers.Point, error) {
	return b.door, nil
}

func newPumpRoom(t *testing.T) (*engine.Engine, *doorPoint, simBus, *testclock.Clock) {
	t.Helper()
	m, diags := manifest.Parse("pump_room.yml", []byte(pumpRoomManifest))
	if m == nil {
		t.Fatal(diags)
	}
	p, diags := policy.Parse("pump_room.policy.yml", []byte(pumpRoomPolicy), m)
	if p == nil {
		t.Fatal(diags)
	}
	clk := testclock.New(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	i2c, err := sim.NewOpener(sim.Options{Now: clk.Now})(context.Background(), m, m.Buses["i2c1"])
	if err != nil {
		t.Fatal(err)
	}
	door := &doorPoint{sample: drivers.Sample{Value: true, At: clk.Now()}}
	e, err := engine.New(m, p, map[string]drivers.Bus{"door_node": doorBus{door}, "i2c1": i2c}, engine.Options{Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, door, i2c.(simBus), clk
}

// A peer confirms a vote only when its own check holds on fresh readings of
// good quality; a reading it cannot trust, a check it does not define, or a
// time window that excludes now refuses, with the reason the requester
// reports.
func TestQuorumCheckOnThisNodesOwnReadings(t *testing.T) {
	e, door, i2c, clk := newPumpRoom(t)
	ctx := context.Background()
	check := func(name string) error { return e.QuorumCheck(ctx, name) }
	refuses := func(t *testing.T, name, want string) {
		t.Helper()
		if err := check(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("quorum check %s: %v, want a refusal mentioning %q", name, err, want)
		}
	}

	if err := check("pump_area_clear"); err != nil {
		t.Fatalf("door closed, tank at 50 %%: %v", err)
	}

	t.Run("condition fails", func(t *testing.T) {
		door.set(drivers.Sample{Value: false, At: clk.Now()}, nil)
		defer door.set(drivers.Sample{Value: true, At: clk.Now()}, nil)
		refuses(t, "pump_area_clear", "quorum_check pump_area_clear: read_door_closed is false, needs read_door_closed == true")
	})
	t.Run("fresh reading, not the cache", func(t *testing.T) {
		if r, _ := e.Read(ctx, operator, "read_tank_level"); r.Value != 50.0 {
			t.Fatalf("level %+v", r)
		}
		if err := i2c.SetValue("tank_level", 12.0); err != nil {
			t.Fatal(err)
		}
		defer i2c.SetValue("tank_level", 50.0)
		// The cache (60 s TTL, clock stopped) still says 50; the check reads the device.
		refuses(t, "pump_area_clear", "tank too low to prime: read_tank_level is 12 %, needs read_tank_level >= 20 %")
	})
	t.Run("stale reading", func(t *testing.T) {
		door.set(drivers.Sample{Value: true, At: clk.Now(), Stale: "the source serves its last good value: switch offline"}, nil)
		defer door.set(drivers.Sample{Value: true, At: clk.Now()}, nil)
		refuses(t, "pump_area_clear", "read_door_closed == true cannot be checked: read_door_closed is stale")
	})
	t.Run("implausible reading", func(t *testing.T) {
		door.set(drivers.Sample{At: clk.Now(), Flag: "the source reports the value as degraded"}, nil)
		defer door.set(drivers.Sample{Value: true, At: clk.Now()}, nil)
		refuses(t, "pump_area_clear", "read_door_closed is implausible")
	})
	t.Run("no reading", func(t *testing.T) {
		door.set(drivers.Sample{}, errors.New("no answer"))
		defer door.set(drivers.Sample{Value: true, At: clk.Now()}, nil)
		refuses(t, "pump_area_clear", "read_door_closed == true cannot be checked")
	})
	t.Run("unknown check", func(t *testing.T) {
		refuses(t, "pump_room_dry", `unknown quorum_check "pump_room_dry"`)
	})
	t.Run("time window", func(t *testing.T) {
		if err := check("not_at_noon"); err != nil {
			t.Fatalf("at 09:00: %v", err)
		}
		clk.Advance(3 * time.Hour)
		defer clk.Advance(21 * time.Hour)
		refuses(t, "not_at_noon", "quorum_check not_at_noon:")
	})

	if err := check("pump_area_clear"); err != nil {
		t.Fatalf("conditions restored: %v", err)
	}
}

// An interlock does not act on an adopted source's stale value either.
func TestInterlockRefusesAStaleSource(t *testing.T) {
	m, diags := manifest.Parse("pump_room.yml", []byte(strings.Replace(pumpRoomManifest, "capabilities:\n", `  gpio: {type: gpio, chip: sim-chip, simulated: true}
capabilities:
  - name: pump
    kind: do
    description: Run the pump.
    binding: {bus: gpio, line: GPIO22, safe_level: low}
    data_type: bool
    semantic_tags: [pump]
    interlocks:
      - {capability: door_closed, op: "==", value: true}
`, 1)))
	if m == nil {
		t.Fatal(diags)
	}
	clk := testclock.New(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	buses := map[string]drivers.Bus{"door_node": doorBus{door: &doorPoint{sample: drivers.Sample{Value: true, At: clk.Now(), Stale: "the source serves its last good value: switch offline"}}}}
	for _, name := range []string{"i2c1", "gpio"} {
		var err error
		if buses[name], err = sim.NewOpener(sim.Options{Now: clk.Now})(context.Background(), m, m.Buses[name]); err != nil {
			t.Fatal(err)
		}
	}
	e, err := engine.New(m, nil, buses, engine.Options{Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gpio := buses["gpio"].(simBus)
	resp, _ := e.Do(context.Background(), operator, "do_pump", promcp.DoRequest{Value: true})
	if resp.Permission != promcp.PolicyDenied || !strings.Contains(resp.Reason, "read_door_closed is stale") || gpio.Writes() != 0 {
		t.Fatalf("pump with a stale door reading: %+v, %d writes", resp, gpio.Writes())
	}
	buses["door_node"].(doorBus).door.set(drivers.Sample{Value: true, At: clk.Now()}, nil)
	if resp, _ := e.Do(context.Background(), operator, "do_pump", promcp.DoRequest{Value: true}); resp.Status != promcp.StatusSuccess || gpio.Writes() != 1 {
		t.Fatalf("pump with a good door reading: %+v, %d writes", resp, gpio.Writes())
	}
}
