package drivers_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/manifest"
)

func fptr(f float64) *float64 { return &f }
func bptr(b bool) *bool       { return &b }

func rng(lo, hi float64) *manifest.Range { return &manifest.Range{Min: fptr(lo), Max: fptr(hi)} }

// fixture is a manifest with one bus and its capabilities, opened through the simulator.
type fixture struct {
	t   testing.TB
	m   *manifest.Manifest
	bus drivers.Bus
	now time.Time
}

func open(t testing.TB, b *manifest.Bus, caps ...*manifest.Capability) *fixture {
	t.Helper()
	if b.Simulation == nil {
		b.Simulation = &manifest.BusSim{Seed: 1}
	}
	for _, c := range caps {
		c.Binding.Bus, c.Binding.Type = b.Name, b.Type
		if c.Kind == "" {
			c.Kind = manifest.KindDo
		}
	}
	f := &fixture{t: t, m: &manifest.Manifest{Buses: map[string]*manifest.Bus{b.Name: b}, Capabilities: caps},
		now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	bus, err := sim.NewOpener(sim.Options{Now: f.clock})(context.Background(), f.m, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	f.bus = bus
	return f
}

func (f *fixture) clock() time.Time { return f.now }

func (f *fixture) bind(name string) drivers.Point {
	f.t.Helper()
	for _, c := range f.m.Capabilities {
		if c.Name == name {
			p, err := drivers.BindWith(f.bus, c, drivers.BindOptions{Now: f.clock})
			if err != nil {
				f.t.Fatal(err)
			}
			return p
		}
	}
	f.t.Fatalf("no capability %s", name)
	return nil
}

type controls interface {
	SetOffline(bool)
	SetFaults(timeoutRate, errorRate float64)
	FailNext(n int, err error)
	Writes() int64
	Transactions() int64
	SetValue(name string, v any) error
	Value(name string) any
}

func (f *fixture) sim() controls { return f.bus.(controls) }

func rtuBus() *manifest.Bus {
	return &manifest.Bus{Name: "rs485", Type: manifest.BusModbusRTU, Simulated: true,
		ModbusRTU: &manifest.ModbusRTUBus{Port: "/dev/ttyUSB0", Baud: 9600, Parity: "none", StopBits: 1, TimeoutMs: 5}}
}

func mb(table manifest.ModbusTable, addr uint16, t manifest.ModbusType) manifest.Binding {
	return manifest.Binding{Modbus: &manifest.ModbusBinding{Unit: 1, Table: table, Address: addr, DataType: t,
		ByteOrder: manifest.BigEndian, WordOrder: manifest.LittleEndian}}
}

func modbusFixture(t testing.TB) *fixture {
	setpoint := &manifest.Capability{Name: "setpoint", DataType: manifest.TypeFloat, Binding: mb(manifest.TableHolding, 0, manifest.MBFloat32), Range: rng(5, 30), SafeValue: 20.0}
	scaled := &manifest.Capability{Name: "flow", DataType: manifest.TypeFloat, Binding: mb(manifest.TableHolding, 2, manifest.MBUint16)}
	scaled.Binding.Modbus.Scale = 0.1
	return open(t, rtuBus(),
		setpoint, scaled,
		&manifest.Capability{Name: "energy", Kind: manifest.KindRead, DataType: manifest.TypeInt, Binding: mb(manifest.TableInput, 0, manifest.MBUint64),
			Simulation: &manifest.PointSim{Initial: 123456789}},
		&manifest.Capability{Name: "pump", DataType: manifest.TypeBool, Binding: mb(manifest.TableCoil, 3, manifest.MBBool)},
		&manifest.Capability{Name: "alarm", Kind: manifest.KindRead, DataType: manifest.TypeBool, Binding: mb(manifest.TableDiscreteInput, 0, manifest.MBBool),
			Simulation: &manifest.PointSim{Initial: true}},
		&manifest.Capability{Name: "mode", DataType: manifest.TypeEnum, EnumValues: []string{"off", "heat", "cool"}, Binding: mb(manifest.TableHolding, 3, manifest.MBInt16)},
		&manifest.Capability{Name: "label", DataType: manifest.TypeString, Binding: manifest.Binding{Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: 10, DataType: manifest.MBString, Length: 4}}},
		&manifest.Capability{Name: "light", DataType: manifest.TypeBool, Binding: manifest.Binding{Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: 20, DataType: manifest.MBBit, Bit: 3}}},
		&manifest.Capability{Name: "heater", DataType: manifest.TypeBool, Binding: manifest.Binding{Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: 20, DataType: manifest.MBBit, Bit: 9}}},
	)
}

func TestModbusPointsReadWrite(t *testing.T) {
	f := modbusFixture(t)
	ctx := context.Background()
	cases := []struct {
		name    string
		initial any
		write   any
	}{
		{"setpoint", 20.0, 22.5},
		{"flow", 0.0, 12.35},
		{"pump", false, true},
		{"mode", "off", "cool"},
		{"label", "", "AB-7"},
		{"light", false, true},
	}
	for _, tc := range cases {
		p := f.bind(tc.name)
		s, err := p.Read(ctx)
		if err != nil || s.Value != tc.initial || s.Flag != "" || !s.At.Equal(f.now) {
			t.Errorf("%s initial: %+v %v, want %v", tc.name, s, err, tc.initial)
		}
		if err := p.Write(ctx, tc.write); err != nil {
			t.Errorf("%s write %v: %v", tc.name, tc.write, err)
		}
		want := tc.write
		if tc.name == "flow" {
			want = 12.4 // 123.5 rounds away to 124 → 12.4
		}
		s, err = p.Read(ctx)
		if err != nil || s.Value != want {
			t.Errorf("%s read-back: %+v %v, want %v", tc.name, s, err, want)
		}
		if got := f.sim().Value(tc.name); got != want {
			t.Errorf("%s device holds %v, want %v", tc.name, got, want)
		}
	}
	if w := f.sim().Writes(); w != int64(len(cases)) {
		t.Errorf("%d writes reached the device, want %d", w, len(cases))
	}
	for name, want := range map[string]any{"energy": int64(123456789), "alarm": true} {
		s, err := f.bind(name).Read(ctx)
		if err != nil || s.Value != want {
			t.Errorf("%s = %+v %v, want %v", name, s, err, want)
		}
	}
}

func TestModbusBitReadModifyWrite(t *testing.T) {
	f := modbusFixture(t)
	ctx := context.Background()
	ms := f.bus.(*sim.Modbus)
	if err := ms.SetRegisters(1, manifest.TableHolding, 20, []uint16{0xF0F0}); err != nil {
		t.Fatal(err)
	}
	light, heater := f.bind("light"), f.bind("heater")
	if err := light.Write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := heater.Write(ctx, false); err != nil {
		t.Fatal(err)
	}
	regs, err := ms.ReadRegisters(ctx, 1, manifest.TableHolding, 20, 1)
	if err != nil || regs[0] != 0xF0F8&^(1<<9) {
		t.Errorf("register 20 = %04x %v, want %04x", regs, err, 0xF0F8&^(1<<9))
	}
	if s, _ := heater.Read(ctx); s.Value != false {
		t.Errorf("heater = %v", s.Value)
	}
	// a bad value never reaches the bus
	tx := f.sim().Transactions()
	if err := light.Write(ctx, "on"); err == nil {
		t.Error("string into a bool accepted")
	}
	if f.sim().Transactions() != tx {
		t.Error("a refused value caused bus traffic")
	}
}

func TestModbusRefusals(t *testing.T) {
	f := modbusFixture(t)
	ctx := context.Background()
	for _, name := range []string{"energy", "alarm"} {
		err := f.bind(name).Write(ctx, 1)
		if !errors.Is(err, drivers.ErrNotWritable) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// a do capability on an input table
	c := &manifest.Capability{Name: "bad", Kind: manifest.KindDo, DataType: manifest.TypeInt, Binding: mb(manifest.TableInput, 0, manifest.MBUint64)}
	p, err := drivers.Bind(f.bus, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, 1); !errors.Is(err, drivers.ErrNotWritable) {
		t.Errorf("input table write: %v", err)
	}
	// past the manifest range, never written
	sp := f.bind("setpoint")
	for _, v := range []any{30.5, 4.0, 1000} {
		if err := sp.Write(ctx, v); !errors.Is(err, drivers.ErrOutOfRange) || !strings.Contains(err.Error(), "5..30") {
			t.Errorf("setpoint %v: %v", v, err)
		}
	}
	if err := f.bind("mode").Write(ctx, "dry"); err == nil || !strings.Contains(err.Error(), `["off" "heat" "cool"]`) {
		t.Errorf("unknown enum name: %v", err)
	}
	if err := f.bind("label").Write(ctx, "too long!"); err == nil {
		t.Error("long string accepted")
	}
	if w := f.sim().Writes(); w != 0 {
		t.Errorf("%d writes reached the device", w)
	}
}

func TestModbusFaults(t *testing.T) {
	f := modbusFixture(t)
	ctx := context.Background()
	sp := f.bind("setpoint")
	s := f.sim()

	s.FailNext(1, nil)
	if _, err := sp.Read(ctx); !errors.Is(err, sim.ErrInjected) || !strings.Contains(err.Error(), "rs485 (simulated modbus-rtu) unit 1 holding 0 float32: read:") {
		t.Errorf("FailNext: %v", err)
	}
	s.SetFaults(1, 0)
	if _, err := sp.Read(ctx); !errors.Is(err, drivers.ErrTimeout) {
		t.Errorf("timeout_rate 1: %v", err)
	}
	s.SetFaults(0, 1)
	if err := sp.Write(ctx, 21.0); !errors.Is(err, sim.ErrInjected) {
		t.Errorf("error_rate 1: %v", err)
	}
	s.SetFaults(0, 0)
	s.SetOffline(true)
	if _, err := sp.Read(ctx); !errors.Is(err, drivers.ErrUnreachable) {
		t.Errorf("offline: %v", err)
	}
	s.SetOffline(false)
	if _, err := sp.Read(ctx); err != nil {
		t.Errorf("back online: %v", err)
	}
	// a unit nobody answers for times out after the bus timeout (5 ms here)
	lost := &manifest.Capability{Name: "lost", Kind: manifest.KindRead, DataType: manifest.TypeInt, Binding: manifest.Binding{Modbus: &manifest.ModbusBinding{Unit: 7, Table: manifest.TableInput, DataType: manifest.MBInt16}}}
	lp, _ := drivers.Bind(f.bus, lost)
	if _, err := lp.Read(ctx); !errors.Is(err, drivers.ErrTimeout) || !strings.Contains(err.Error(), "unit 7") {
		t.Errorf("unknown unit: %v", err)
	}
	if s.Writes() != 0 {
		t.Errorf("failed writes counted: %d", s.Writes())
	}
	// exceptions stay matchable through the point's wrapping
	ms := f.bus.(*sim.Modbus)
	ms.SetRegisters(1, manifest.TableHolding, 0, []uint16{0, 0x7FC0}) // NaN in CDAB order
	if s, err := sp.Read(ctx); err != nil || s.Value != nil || s.Flag != "device returned NaN" {
		t.Errorf("NaN: %+v %v", s, err)
	}
	var ex *drivers.ModbusException
	_, err := ms.ReadRegisters(ctx, 1, manifest.TableHolding, 4, 2)
	if !errors.As(err, &ex) || ex.Code != 2 || ex.Function != 3 {
		t.Errorf("unbound address: %v", err)
	}
	_, err = ms.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 126)
	if !errors.As(err, &ex) || ex.Code != 3 {
		t.Errorf("126 registers: %v", err)
	}
	_, err = ms.ReadBits(ctx, 1, manifest.TableCoil, 3, 2001)
	if !errors.As(err, &ex) || ex.Code != 3 || ex.Function != 1 {
		t.Errorf("2001 bits: %v", err)
	}
	if err := ms.WriteRegisters(ctx, 1, 100, []uint16{1}); !errors.As(err, &ex) || ex.Code != 2 || ex.Function != 6 {
		t.Errorf("write unbound: %v", err)
	}
	// a point bound to a register the device lacks reports the exception
	c := &manifest.Capability{Name: "ghost", Kind: manifest.KindRead, DataType: manifest.TypeInt, Binding: mb(manifest.TableHolding, 30, manifest.MBInt16)}
	gp, _ := drivers.Bind(f.bus, c)
	if _, err := gp.Read(ctx); !errors.As(err, &ex) || ex.Code != 2 {
		t.Errorf("ghost point: %v", err)
	}
}

func TestContextCancel(t *testing.T) {
	f := modbusFixture(t)
	f.bus.(*sim.Modbus).SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := f.bind("setpoint").Read(ctx); !errors.Is(err, drivers.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", err)
	}
}

func i2cFixture(t testing.TB) *fixture {
	b := &manifest.Bus{Name: "i2c1", Type: manifest.BusI2C, I2C: &manifest.I2CBus{Device: "/dev/i2c-1"}}
	return open(t, b,
		&manifest.Capability{Name: "temperature", Kind: manifest.KindRead, DataType: manifest.TypeFloat, Unit: "°C",
			Binding:    manifest.Binding{I2C: &manifest.I2CBinding{Address: 0x48, Register: 0, Width: 2, ByteOrder: manifest.BigEndian, Signed: true, Shift: 4, Scale: 0.0625}},
			Simulation: &manifest.PointSim{Initial: 25.0}},
		&manifest.Capability{Name: "gain", DataType: manifest.TypeInt, Binding: manifest.Binding{I2C: &manifest.I2CBinding{Address: 0x20, Register: 1, Mask: 0x0E, Shift: 1}}},
		&manifest.Capability{Name: "enable", DataType: manifest.TypeBool, Binding: manifest.Binding{I2C: &manifest.I2CBinding{Address: 0x20, Register: 1, Mask: 0x80, Shift: 7}}},
		&manifest.Capability{Name: "duty", DataType: manifest.TypeInt, Range: rng(0, 1000), Binding: manifest.Binding{I2C: &manifest.I2CBinding{Address: 0x20, Register: 2, Width: 2, ByteOrder: manifest.LittleEndian}}},
	)
}

func TestI2CPoints(t *testing.T) {
	f := i2cFixture(t)
	ctx := context.Background()
	temp := f.bind("temperature")
	if s, err := temp.Read(ctx); err != nil || s.Value != 25.0 {
		t.Errorf("temperature = %+v %v", s, err)
	}
	if err := f.sim().SetValue("temperature", -25.0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if err := f.bus.(drivers.I2CBus).Tx(ctx, 0x48, []byte{0}, buf); err != nil || buf[0] != 0xE7 || buf[1] != 0 {
		t.Errorf("raw TMP102 bytes % x %v", buf, err)
	}
	if s, _ := temp.Read(ctx); s.Value != -25.0 {
		t.Errorf("temperature = %v", s.Value)
	}
	if err := temp.Write(ctx, 1.0); !errors.Is(err, drivers.ErrNotWritable) {
		t.Errorf("write to a read capability: %v", err)
	}

	// two fields of register 1 and the bits around them survive each other's writes
	ib := f.bus.(drivers.I2CBus)
	if err := ib.Tx(ctx, 0x20, []byte{1, 0x71}, nil); err != nil {
		t.Fatal(err)
	}
	gain, enable := f.bind("gain"), f.bind("enable")
	if err := gain.Write(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := enable.Write(ctx, true); err != nil {
		t.Fatal(err)
	}
	ib.Tx(ctx, 0x20, []byte{1}, buf[:1])
	if buf[0] != 0xFB { // 0x71 → gain 5 in bits 1..3 → 0x7B → bit 7 set → 0xFB
		t.Errorf("register 1 = %02x, want fb", buf[0])
	}
	if err := gain.Write(ctx, 8); err == nil || !strings.Contains(err.Error(), "unsigned 3-bit field (0..7)") {
		t.Errorf("gain 8: %v", err)
	}
	duty := f.bind("duty")
	if err := duty.Write(ctx, 1000.0); err != nil {
		t.Fatal(err)
	}
	ib.Tx(ctx, 0x20, []byte{2}, buf)
	if buf[0] != 0xE8 || buf[1] != 0x03 {
		t.Errorf("duty bytes % x", buf)
	}
	if s, _ := duty.Read(ctx); s.Value != int64(1000) {
		t.Errorf("duty = %v", s.Value)
	}
	if err := ib.Tx(ctx, 0x49, []byte{0}, buf); !errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), "no device at 0x49") {
		t.Errorf("absent device: %v", err)
	}
	if d := duty.Describe(); d != "i2c1 (simulated i2c) 0x20 reg 0x02" {
		t.Errorf("Describe = %q", d)
	}
}

func gpioFixture(t testing.TB) *fixture {
	b := &manifest.Bus{Name: "gpio", Type: manifest.BusGPIO, GPIO: &manifest.GPIOBus{Chip: "pinctrl-bcm2835"}}
	return open(t, b,
		&manifest.Capability{Name: "relay", DataType: manifest.TypeBool, Binding: manifest.Binding{GPIO: &manifest.GPIOBinding{Line: "GPIO17", Direction: manifest.DirOutput, SafeLevel: bptr(false)}}},
		&manifest.Capability{Name: "valve", DataType: manifest.TypeEnum, EnumValues: []string{"closed", "open"},
			Binding: manifest.Binding{GPIO: &manifest.GPIOBinding{Offset: 5, HasOffset: true, Direction: manifest.DirOutput, ActiveLow: true, SafeLevel: bptr(false)}}},
		&manifest.Capability{Name: "door", Kind: manifest.KindRead, DataType: manifest.TypeBool, Binding: manifest.Binding{GPIO: &manifest.GPIOBinding{Line: "GPIO27", Direction: manifest.DirInput, ActiveLow: true}}},
	)
}

func TestGPIOPoints(t *testing.T) {
	f := gpioFixture(t)
	ctx := context.Background()
	chip := f.bus.(*sim.Chip)
	relay := f.bind("relay")
	if s, err := relay.Read(ctx); err != nil || s.Value != false {
		t.Errorf("relay at start = %+v %v", s, err)
	}
	if err := relay.Write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !chip.Level("GPIO17") {
		t.Error("relay line low after writing true")
	}
	if s, _ := relay.Read(ctx); s.Value != true {
		t.Errorf("relay read-back %v", s.Value)
	}
	valve := f.bind("valve")
	// Its safe_level low is physical: active-low, the valve starts logically true.
	if s, err := valve.Read(ctx); err != nil || s.Value != "open" {
		t.Errorf("active-low valve with safe_level low at start = %+v %v, want open", s, err)
	}
	if err := valve.Write(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	if v := f.sim().Value("valve"); v != "open" {
		t.Errorf("valve = %v", v)
	}
	door := f.bind("door")
	if err := chip.SetInput("GPIO27", false); err != nil { // active-low: low wire = door open (true)
		t.Fatal(err)
	}
	if s, _ := door.Read(ctx); s.Value != true {
		t.Errorf("door with a low wire = %v", s.Value)
	}
	chip.SetInput("GPIO27", true)
	if s, _ := door.Read(ctx); s.Value != false {
		t.Errorf("door with a high wire = %v", s.Value)
	}
	if err := door.Write(ctx, true); !errors.Is(err, drivers.ErrNotWritable) {
		t.Errorf("input write: %v", err)
	}
	if err := chip.SetInput("GPIO17", true); err == nil {
		t.Error("SetInput on an output accepted")
	}
	f.sim().SetOffline(true)
	if _, err := door.Read(ctx); !errors.Is(err, drivers.ErrUnreachable) {
		t.Errorf("offline: %v", err)
	}
	if d := door.Describe(); d != "gpio (simulated gpio) line GPIO27 input" {
		t.Errorf("Describe = %q", d)
	}
	// an output without a safe level is refused at bind
	bad := &manifest.Capability{Name: "bad", Kind: manifest.KindDo, DataType: manifest.TypeBool, Binding: manifest.Binding{GPIO: &manifest.GPIOBinding{Line: "GPIO17", Direction: manifest.DirOutput}}}
	if _, err := drivers.Bind(f.bus, bad); err == nil || !strings.Contains(err.Error(), "safe level") {
		t.Errorf("no safe level: %v", err)
	}
}

func TestGPIOSafeLevelAtBind(t *testing.T) {
	f := gpioFixture(t)
	f.m.Capabilities[0].Binding.GPIO.SafeLevel = bptr(true)
	f.bind("relay")
	if !f.bus.(*sim.Chip).Level("GPIO17") {
		t.Error("output did not start at its safe level")
	}
}

func TestBindMismatch(t *testing.T) {
	f := gpioFixture(t)
	c := &manifest.Capability{Name: "x", DataType: manifest.TypeInt, Binding: mb(manifest.TableHolding, 0, manifest.MBInt16)}
	if _, err := drivers.Bind(f.bus, c); err == nil || !strings.Contains(err.Error(), "has a modbus binding but bus simulated gpio is not a modbus bus") {
		t.Errorf("mismatch: %v", err)
	}
	if _, err := drivers.Bind(f.bus, &manifest.Capability{Name: "y"}); err == nil {
		t.Error("empty binding accepted")
	}
}

func TestFollows(t *testing.T) {
	f := open(t, rtuBus(),
		&manifest.Capability{Name: "fan_speed", DataType: manifest.TypeFloat, Range: rng(0, 100), Binding: mb(manifest.TableHolding, 0, manifest.MBUint16)},
		&manifest.Capability{Name: "fan_speed_actual", Kind: manifest.KindRead, DataType: manifest.TypeFloat, Binding: mb(manifest.TableInput, 0, manifest.MBUint16),
			Simulation: &manifest.PointSim{Follows: "fan_speed"}},
	)
	ctx := context.Background()
	if err := f.bind("fan_speed").Write(ctx, 40); err != nil {
		t.Fatal(err)
	}
	if s, err := f.bind("fan_speed_actual").Read(ctx); err != nil || s.Value != 40.0 {
		t.Errorf("actual = %+v %v", s, err)
	}
}

func TestConcurrentPoints(t *testing.T) {
	f := modbusFixture(t)
	ctx := context.Background()
	sp := f.bind("setpoint")
	// light and heater are bits of one register. Each goroutine alone writes its
	// bit, so it must always read back what it wrote last: a read-modify-write
	// by the other that is not serialised would put back a stale bit.
	var wg sync.WaitGroup
	for _, name := range []string{"light", "heater"} {
		p := f.bind(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 500 {
				on := j%2 == 0
				if err := p.Write(ctx, on); err != nil {
					t.Error(err)
					return
				}
				if _, err := sp.Read(ctx); err != nil {
					t.Error(err)
				}
				if s, err := p.Read(ctx); err != nil || s.Value != on {
					t.Errorf("%s reads %v after writing %v: the other bit's write undid it (%v)", name, s.Value, on, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if f.sim().Writes() != 1000 {
		t.Errorf("writes = %d, want 1000", f.sim().Writes())
	}
}

type fakeBus struct {
	name   string
	closed *[]string
}

func (b fakeBus) Describe() string { return b.name }
func (b fakeBus) Close() error     { *b.closed = append(*b.closed, b.name); return nil }

func TestOpenAll(t *testing.T) {
	m := &manifest.Manifest{Buses: map[string]*manifest.Bus{
		"a": {Name: "a", Type: manifest.BusI2C},
		"b": {Name: "b", Type: manifest.BusModbusTCP, Simulated: true},
		"c": {Name: "c", Type: manifest.BusGPIO},
	}}
	var closed []string
	fake := func(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
		return fakeBus{name: "real " + b.Name, closed: &closed}, nil
	}
	simOpen := func(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
		return fakeBus{name: "sim " + b.Name, closed: &closed}, nil
	}
	ctx := context.Background()
	buses, err := drivers.OpenAll(ctx, m, drivers.Openers{manifest.BusI2C: fake, manifest.BusGPIO: fake}, simOpen, false)
	if err != nil || buses["a"].Describe() != "real a" || buses["b"].Describe() != "sim b" || buses["c"].Describe() != "real c" {
		t.Fatalf("OpenAll = %v %v", buses, err)
	}
	buses, err = drivers.OpenAll(ctx, m, nil, simOpen, true)
	if err != nil || buses["a"].Describe() != "sim a" {
		t.Fatalf("simulate all = %v %v", buses, err)
	}
	// no GPIO driver: a and b were opened first and are closed again, last first
	_, err = drivers.OpenAll(ctx, m, drivers.Openers{manifest.BusI2C: fake}, simOpen, false)
	if err == nil || err.Error() != "bus c: no driver for bus type gpio in this build" {
		t.Errorf("missing driver: %v", err)
	}
	if strings.Join(closed, ",") != "sim b,real a" {
		t.Errorf("closed %v", closed)
	}
}
