package sim_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/manifest"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func fptr(f float64) *float64 { return &f }

func tcpBus(seed int64) *manifest.Bus {
	return &manifest.Bus{Name: "meter", Type: manifest.BusModbusTCP, Simulated: true,
		ModbusTCP: &manifest.ModbusTCPBus{Address: "127.0.0.1:502", TimeoutMs: 5}, Simulation: &manifest.BusSim{Seed: seed}}
}

func reading(name string, addr uint16, s *manifest.PointSim) *manifest.Capability {
	return &manifest.Capability{Name: name, Kind: manifest.KindRead, DataType: manifest.TypeFloat,
		Range: &manifest.Range{Min: fptr(0), Max: fptr(100)}, Simulation: s,
		Binding: manifest.Binding{Bus: "meter", Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableInput, Address: addr,
			DataType: manifest.MBFloat64, ByteOrder: manifest.BigEndian, WordOrder: manifest.BigEndian}}}
}

func openBus(t *testing.T, clk *clock, b *manifest.Bus, caps ...*manifest.Capability) (drivers.Bus, error) {
	t.Helper()
	m := &manifest.Manifest{Buses: map[string]*manifest.Bus{b.Name: b}, Capabilities: caps}
	bus, err := sim.NewOpener(sim.Options{Now: clk.Now})(context.Background(), m, b)
	if err == nil {
		t.Cleanup(func() { bus.Close() })
	}
	return bus, err
}

func read(t *testing.T, bus drivers.Bus, c *manifest.Capability) any {
	t.Helper()
	p, err := drivers.Bind(bus, c)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Flag != "" {
		return s.Flag
	}
	return s.Value
}

func TestWaveforms(t *testing.T) {
	// phase → expected offset from the initial value for amplitude 10
	want := map[string][]float64{
		"sine":     {0, 10, 0, -10},
		"triangle": {0, 10, 0, -10},
		"square":   {10, 10, -10, -10},
		"sawtooth": {0, 5, -10, -5},
	}
	for shape, offsets := range want {
		clk := &clock{now: t0}
		c := reading("v", 0, &manifest.PointSim{Initial: 50, Wave: &manifest.Waveform{Shape: shape, Amplitude: 10, PeriodS: 60}})
		bus, err := openBus(t, clk, tcpBus(1), c)
		if err != nil {
			t.Fatal(err)
		}
		for i, off := range offsets {
			clk.now = t0.Add(time.Duration(i) * 15 * time.Second).Add(time.Hour) // whole periods later
			got := read(t, bus, c).(float64)
			if math.Abs(got-(50+off)) > 1e-9 {
				t.Errorf("%s at phase %d/4 = %v, want %v", shape, i, got, 50+off)
			}
		}
	}
}

func TestNoiseIsRepeatable(t *testing.T) {
	series := func(seed int64) []float64 {
		clk := &clock{now: t0}
		c := reading("v", 0, &manifest.PointSim{Initial: 20.0, Noise: 0.5})
		bus, err := openBus(t, clk, tcpBus(seed), c)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for range 20 {
			out = append(out, read(t, bus, c).(float64))
		}
		return out
	}
	a, b, other := series(42), series(42), series(43)
	var sum, sq float64
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 gave %v then %v at read %d", a[i], b[i], i)
		}
		sum += a[i]
		sq += (a[i] - 20) * (a[i] - 20)
	}
	if a[0] == other[0] && a[1] == other[1] {
		t.Error("seeds 42 and 43 gave the same noise")
	}
	if mean := sum / 20; math.Abs(mean-20) > 0.5 {
		t.Errorf("noise mean %v is far from 20", mean)
	}
	if sq == 0 {
		t.Error("no noise at all")
	}
}

func TestImplausible(t *testing.T) {
	clk := &clock{now: t0}
	c := reading("v", 0, &manifest.PointSim{Initial: 20.0, Implausible: 0.5})
	bus, err := openBus(t, clk, tcpBus(7), c)
	if err != nil {
		t.Fatal(err)
	}
	outside := 0
	for range 100 {
		v := read(t, bus, c).(float64)
		switch v {
		case 20:
		case 150: // max + half the span
			outside++
		default:
			t.Fatalf("unexpected value %v", v)
		}
	}
	if outside < 30 || outside > 70 {
		t.Errorf("%d of 100 reads implausible at rate 0.5", outside)
	}
}

// A read that shares its do's name (read_relay beside do_relay, on its own
// line) follows the do, not itself.
func TestFollowsTheDoOfTheSameName(t *testing.T) {
	gpio := &manifest.Bus{Name: "gpio", Type: manifest.BusGPIO, Simulated: true}
	relay := &manifest.Capability{Name: "relay", Kind: manifest.KindDo, DataType: manifest.TypeBool,
		Binding: manifest.Binding{Bus: "gpio", GPIO: &manifest.GPIOBinding{Line: "R", Direction: manifest.DirOutput, SafeLevel: new(bool)}}}
	state := &manifest.Capability{Name: "relay", Kind: manifest.KindRead, DataType: manifest.TypeBool, Simulation: &manifest.PointSim{Follows: "relay"},
		Binding: manifest.Binding{Bus: "gpio", GPIO: &manifest.GPIOBinding{Line: "S", Direction: manifest.DirInput}}}
	m := &manifest.Manifest{Buses: map[string]*manifest.Bus{"gpio": gpio}, Capabilities: []*manifest.Capability{relay, state}}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: (&clock{now: t0}).Now}), false)
	if err != nil {
		t.Fatal(err)
	}
	defer buses["gpio"].Close()
	rp, err := drivers.Bind(buses["gpio"], relay)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Write(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, buses["gpio"], state); got != true {
		t.Errorf("read_relay after do_relay true = %v", got)
	}
}

func TestFollowsAcrossBuses(t *testing.T) {
	clk := &clock{now: t0}
	gpio := &manifest.Bus{Name: "gpio", Type: manifest.BusGPIO, Simulated: true}
	relay := &manifest.Capability{Name: "relay", Kind: manifest.KindDo, DataType: manifest.TypeBool,
		Binding: manifest.Binding{Bus: "gpio", GPIO: &manifest.GPIOBinding{Line: "R", Direction: manifest.DirOutput, SafeLevel: new(bool)}}}
	state := &manifest.Capability{Name: "relay_state", Kind: manifest.KindRead, DataType: manifest.TypeBool, Simulation: &manifest.PointSim{Follows: "relay"},
		Binding: manifest.Binding{Bus: "meter", Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableDiscreteInput, DataType: manifest.MBBool}}}
	meter := tcpBus(1)
	m := &manifest.Manifest{Buses: map[string]*manifest.Bus{"gpio": gpio, "meter": meter}, Capabilities: []*manifest.Capability{relay, state}}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), false)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := drivers.Bind(buses["gpio"], relay)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, buses["meter"], state); got != false {
		t.Errorf("state before = %v", got)
	}
	if err := rp.Write(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, buses["meter"], state); got != true {
		t.Errorf("state after = %v", got)
	}
	buses["gpio"].Close()
	p, _ := drivers.Bind(buses["meter"], state)
	if _, err := p.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "follows relay, which is not on an open simulated bus") {
		t.Errorf("after the target's bus closed: %v", err)
	}
	buses["meter"].Close()
}

func TestInitialValues(t *testing.T) {
	clk := &clock{now: t0}
	do := func(name string, dt manifest.DataType, r *manifest.Range, safe any, addr uint16) *manifest.Capability {
		return &manifest.Capability{Name: name, Kind: manifest.KindDo, DataType: dt, Range: r, SafeValue: safe, EnumValues: []string{"auto", "manual"},
			Binding: manifest.Binding{Bus: "meter", Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: addr, DataType: manifest.MBInt16}}}
	}
	caps := []*manifest.Capability{
		do("plain", manifest.TypeFloat, nil, nil, 0),
		do("ranged", manifest.TypeFloat, &manifest.Range{Min: fptr(10), Max: fptr(20)}, nil, 1),
		do("negative", manifest.TypeInt, &manifest.Range{Max: fptr(-5)}, nil, 2),
		do("safe", manifest.TypeInt, &manifest.Range{Min: fptr(10), Max: fptr(20)}, 15, 3),
		do("mode", manifest.TypeEnum, nil, nil, 4),
		do("explicit", manifest.TypeFloat, nil, 3, 5),
	}
	caps[5].Simulation = &manifest.PointSim{Initial: 7}
	bus, err := openBus(t, clk, tcpBus(1), caps...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"plain": 0.0, "ranged": 10.0, "negative": int64(-5), "safe": int64(15), "mode": "auto", "explicit": 7.0}
	type valuer interface{ Value(string) any }
	for name, w := range want {
		if got := bus.(valuer).Value(name); got != w {
			t.Errorf("%s starts at %v (%T), want %v", name, got, got, w)
		}
	}
}

// A read bound to a setpoint's register must see the setpoint's starting
// value, whichever of the two the manifest lists first.
func TestSharedRegisterKeepsItsSeed(t *testing.T) {
	setpoint := func(kind manifest.Kind, initial any) *manifest.Capability {
		c := &manifest.Capability{Name: "setpoint", Kind: kind, DataType: manifest.TypeFloat,
			Binding: manifest.Binding{Bus: "meter", Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: 4,
				DataType: manifest.MBFloat32, ByteOrder: manifest.BigEndian, WordOrder: manifest.BigEndian, Scale: 1}}}
		if initial != nil {
			c.Simulation = &manifest.PointSim{Initial: initial}
		}
		return c
	}
	for name, caps := range map[string][]*manifest.Capability{
		"do first":   {setpoint(manifest.KindDo, 18.0), setpoint(manifest.KindRead, nil)},
		"read first": {setpoint(manifest.KindRead, nil), setpoint(manifest.KindDo, 18.0)},
	} {
		t.Run(name, func(t *testing.T) {
			bus, err := openBus(t, &clock{now: t0}, tcpBus(1), caps...)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range caps {
				if got := read(t, bus, c); got != 18.0 {
					t.Fatalf("%s %s reads %v, want 18", c.Kind, c.Name, got)
				}
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	clk := &clock{now: t0}
	cases := []struct {
		c    *manifest.Capability
		want string
	}{
		{func() *manifest.Capability {
			c := reading("v", 0, &manifest.PointSim{Noise: 1})
			c.Kind = manifest.KindDo
			return c
		}(), "apply to read capabilities"},
		{reading("v", 0, &manifest.PointSim{Wave: &manifest.Waveform{Shape: "ramp", PeriodS: 1}}), `shape "ramp"`},
		{reading("v", 0, &manifest.PointSim{Wave: &manifest.Waveform{Shape: "sine"}}), "positive period_s"},
		{reading("v", 0, &manifest.PointSim{Follows: "nothing"}), `follows "nothing", which is not a do capability`},
		{reading("v", 0, &manifest.PointSim{Initial: "hot"}), "initial value hot"},
		{func() *manifest.Capability {
			c := reading("v", 0, &manifest.PointSim{Implausible: 0.1})
			c.Range = nil
			return c
		}(), "needs a range"},
		{func() *manifest.Capability {
			c := reading("v", 0, &manifest.PointSim{Noise: 1})
			c.DataType = manifest.TypeBool
			c.Binding.Modbus.DataType = manifest.MBUint16
			return c
		}(), "need a float or int capability"},
	}
	for _, tc := range cases {
		_, err := openBus(t, clk, tcpBus(1), tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

func TestLatencyAndJitter(t *testing.T) {
	clk := &clock{now: t0}
	b := tcpBus(3)
	b.Simulation.LatencyMs, b.Simulation.JitterMs = 2, 1
	c := reading("v", 0, nil)
	bus, err := openBus(t, clk, b, c)
	if err != nil {
		t.Fatal(err)
	}
	// cancellation ends the wait at once
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, _ := drivers.Bind(bus, c)
	if _, err := p.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := p.Read(context.Background()); err != nil {
		t.Errorf("with latency: %v", err)
	}
	if n := bus.(*sim.Modbus).Transactions(); n != 2 {
		t.Errorf("%d transactions, want 2", n)
	}
}

func TestFaultsAreRepeatable(t *testing.T) {
	pattern := func() string {
		b := tcpBus(99)
		b.Simulation.TimeoutRate, b.Simulation.ErrorRate = 0.2, 0.2
		c := reading("v", 0, nil)
		bus, err := openBus(t, &clock{now: t0}, b, c)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := drivers.Bind(bus, c)
		var sb strings.Builder
		for range 40 {
			_, err := p.Read(context.Background())
			switch {
			case err == nil:
				sb.WriteByte('.')
			case errors.Is(err, drivers.ErrTimeout):
				sb.WriteByte('T')
			case errors.Is(err, sim.ErrInjected):
				sb.WriteByte('E')
			default:
				t.Fatal(err)
			}
		}
		return sb.String()
	}
	a, b := pattern(), pattern()
	if a != b || !strings.Contains(a, "T") || !strings.Contains(a, "E") || !strings.Contains(a, ".") {
		t.Errorf("fault patterns %s / %s", a, b)
	}
}

func TestI2CPointerSemantics(t *testing.T) {
	b := &manifest.Bus{Name: "i2c", Type: manifest.BusI2C, Simulated: true}
	c := &manifest.Capability{Name: "word", Kind: manifest.KindDo, DataType: manifest.TypeInt,
		Binding: manifest.Binding{Bus: "i2c", I2C: &manifest.I2CBinding{Address: 0x50, Register: 0xFE, Width: 2, ByteOrder: manifest.BigEndian}}}
	bus, err := openBus(t, &clock{now: t0}, b, c)
	if err != nil {
		t.Fatal(err)
	}
	ib := bus.(*sim.I2C)
	ctx := context.Background()
	// write FE, FF and wrap to 00
	if err := ib.Tx(ctx, 0x50, []byte{0xFE, 0x12, 0x34, 0x56}, nil); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 3)
	if err := ib.Tx(ctx, 0x50, []byte{0xFE}, r); err != nil || r[0] != 0x12 || r[1] != 0x34 || r[2] != 0x56 {
		t.Errorf("read back % x %v", r, err)
	}
	if v := ib.Value("word"); v != int64(0x1234) {
		t.Errorf("word = %v", v)
	}
	if ib.Writes() != 1 {
		t.Errorf("writes = %d", ib.Writes())
	}
}
