package engine_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// encodingCase is one random binding with random bounds.
type encodingCase struct {
	register string  // Modbus data_type
	scale    float64 // binding scale
	isInt    bool    // capability data_type int
	lo, hi   float64 // manifest range
	guard    *[2]float64
	clamp    bool
}

func (c encodingCase) step() float64 { return c.scale }

func (c encodingCase) files() (string, string) {
	dt := "float"
	if c.isInt {
		dt = "int"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	wordOrder := ", word_order: big"
	if c.register == "uint16" || c.register == "int16" {
		wordOrder = ""
	}
	m := fmt.Sprintf(`physmcp_version: "0.1"
device: {id: grid_rig, type: test_rig}
buses:
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
capabilities:
  - name: valve_opening
    kind: do
    description: A scaled valve opening.
    binding: {bus: mb, unit: 1, table: holding, address: 0, data_type: %s, scale: %s, byte_order: big%s}
    data_type: %s
    unit: "%%"
    range: {min: %s, max: %s}
    semantic_tags: [valve]
    side_effects: ["moves the valve"]
    simulation: {initial: %s}
`, c.register, f(c.scale), wordOrder, dt, f(c.lo), f(c.hi), f(math.Round((c.lo+c.hi)/2/c.scale)*c.scale))
	p := `physmcp_policy_version: "0.1"
identity: {local_role: operator}
`
	if c.guard != nil {
		how := "deny"
		if c.clamp {
			how = "clamp"
		}
		p += fmt.Sprintf(`capabilities:
  do_valve_opening:
    rules:
      - {type: range_guard, min: %s, max: %s, on_violation: %s}
`, f(c.guard[0]), f(c.guard[1]), how)
	}
	return m, p
}

// Property: whatever the bounds and the encoding, no value at or around a
// range or guard bound is ever written outside the bounds, and a success
// answers the value the device holds.
func TestQuantisedWritesNeverPassABound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	registers := []struct {
		name   string
		lo, hi float64 // raw range
	}{{"uint16", 0, 65535}, {"int16", -32768, 32767}, {"int32", -1 << 31, 1<<31 - 1}, {"uint32", 0, 1<<32 - 1}}
	scales := []float64{10, 1, 0.5, 0.1, 0.01, 0.25}
	cases, outside, written := 0, 0, 0
	for cfg := 0; cases < 10_000; cfg++ {
		reg := registers[rng.IntN(len(registers))]
		c := encodingCase{register: reg.name, scale: scales[rng.IntN(len(scales))]}
		c.isInt = c.scale >= 1 && rng.IntN(2) == 0
		// random bounds, often off the grid, inside what the register holds
		span := math.Min(reg.hi-reg.lo, 2000) * c.scale
		base := math.Max(reg.lo*c.scale, -span/2)
		c.lo = roundTo(base+rng.Float64()*span/2, 3)
		c.hi = roundTo(c.lo+rng.Float64()*span/2+c.scale, 3)
		if c.isInt {
			c.lo, c.hi = math.Ceil(c.lo), math.Floor(c.hi)
		}
		if rng.IntN(2) == 0 {
			g := [2]float64{roundTo(c.lo+rng.Float64()*(c.hi-c.lo)/3, 2), roundTo(c.hi-rng.Float64()*(c.hi-c.lo)/3, 2)}
			c.guard, c.clamp = &g, rng.IntN(2) == 0
		}
		e, dev := gridEngine(t, c)
		lo, hi := c.lo, c.hi
		if c.guard != nil {
			lo, hi = math.Max(lo, c.guard[0]), math.Min(hi, c.guard[1])
		}
		var probes []float64
		for _, b := range []float64{c.lo, c.hi, lo, hi} {
			for _, d := range []float64{0, c.step() / 2, c.step() / 3, 0.001, c.step()} {
				probes = append(probes, b-d, b+d)
			}
		}
		for _, v := range probes {
			if c.isInt {
				v = math.Round(v)
			}
			cases++
			resp, err := e.Do(context.Background(), operator, "do_valve_opening", promcp.DoRequest{Value: v, IdempotencyKey: fmt.Sprintf("%d-%d", cfg, cases)})
			if err != nil {
				t.Fatal(err)
			}
			held, _ := drivers.AsFloat(dev.Value("valve_opening"))
			if held < lo-1e-9 || held > hi+1e-9 {
				outside++
				t.Errorf("%+v guard %v: do %v answered %s %v; the device holds %v, outside [%v, %v]", c, c.guard, v, resp.Status, resp.AppliedValue, held, lo, hi)
			}
			if resp.Status != promcp.StatusFailed {
				written++
				if got, _ := drivers.AsFloat(resp.AppliedValue); got != held {
					t.Errorf("%+v: do %v answered applied %v, the device holds %v", c, v, resp.AppliedValue, held)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	t.Logf("%d writes asked at and around the bounds, %d written, %d outside", cases, written, outside)
}

func roundTo(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}

func gridEngine(t *testing.T, c encodingCase) (*engine.Engine, simBus) {
	t.Helper()
	mText, pText := c.files()
	m, diags := manifest.Parse("grid.manifest.yml", []byte(mText))
	if m == nil {
		t.Fatalf("manifest: %s\n%s", diags, mText)
	}
	p, diags := policy.Parse("grid.policy.yml", []byte(pText), m)
	if p == nil {
		t.Fatalf("policy: %s\n%s", diags, pText)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, buses["mb"].(simBus)
}

// The two cases: rounding must not carry a value past a bound.
func TestRoundingNeverCrossesABound(t *testing.T) {
	for _, tc := range []struct {
		c       encodingCase
		value   float64
		applied float64
		status  promcp.Status
	}{
		// uint16 × 10, range 0..15: 15 would be written as 20.
		{encodingCase{register: "uint16", scale: 10, isInt: true, lo: 0, hi: 15}, 15, 10, promcp.StatusPartial},
		// guard max 89.97 at 0.1: 89.97 would be written as 90.0.
		{encodingCase{register: "uint16", scale: 0.1, lo: 0, hi: 100, guard: &[2]float64{0, 89.97}}, 89.97, 89.9, promcp.StatusPartial},
		// rounding inside the bounds is the nearest value, and a success
		{encodingCase{register: "uint16", scale: 0.1, lo: 0, hi: 100}, 21.53, 21.5, promcp.StatusSuccess},
	} {
		e, dev := gridEngine(t, tc.c)
		resp, err := e.Do(context.Background(), operator, "do_valve_opening", promcp.DoRequest{Value: tc.value, IdempotencyKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != tc.status || resp.AppliedValue != dev.Value("valve_opening") {
			t.Errorf("%v at scale %v: %+v", tc.value, tc.c.scale, resp)
		}
		if got, _ := drivers.AsFloat(dev.Value("valve_opening")); got != tc.applied {
			t.Errorf("%v at scale %v: the device holds %v, want %v", tc.value, tc.c.scale, got, tc.applied)
		}
	}
}
