package drivers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/manifest"
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// absent is an opener for a resource that is missing until present is set,
// and then opens through the simulator.
type absent struct {
	present  atomic.Bool
	attempts atomic.Int32
	sim      drivers.Opener
}

func (a *absent) open(ctx context.Context, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	a.attempts.Add(1)
	if !a.present.Load() {
		return nil, fmt.Errorf("%w: opening /dev/ttyUSB0: %w", drivers.ErrUnreachable, syscall.ENOENT)
	}
	return a.sim(ctx, m, b)
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

func pendingManifest() *manifest.Manifest {
	rtu := rtuBus()
	rtu.Simulated = false
	i2c := &manifest.Bus{Name: "i2c1", Type: manifest.BusI2C, I2C: &manifest.I2CBus{Device: "/dev/i2c-1"}}
	setpoint := &manifest.Capability{Name: "setpoint", Kind: manifest.KindDo, DataType: manifest.TypeFloat, Range: rng(5, 30), SafeValue: 20.0,
		Binding: mb(manifest.TableHolding, 0, manifest.MBFloat32)}
	setpoint.Binding.Bus, setpoint.Binding.Type = rtu.Name, rtu.Type
	temp := &manifest.Capability{Name: "temperature", Kind: manifest.KindRead, DataType: manifest.TypeInt,
		Binding: manifest.Binding{Bus: i2c.Name, Type: i2c.Type, I2C: &manifest.I2CBinding{Address: 0x48, Register: 0}}}
	return &manifest.Manifest{Buses: map[string]*manifest.Bus{rtu.Name: rtu, i2c.Name: i2c}, Capabilities: []*manifest.Capability{setpoint, temp}}
}

// A bus that cannot be opened at start is pending: its calls fail with
// ErrNotOpen and the reason, it is opened in the background, the OnOpen hook
// writes first, and each change of state is logged once.
func TestPendingBus(t *testing.T) {
	m := pendingManifest()
	serial, adapter := &absent{sim: sim.Open}, &absent{sim: sim.Open}
	var logs logBuffer
	var hook struct {
		calls          atomic.Int32
		wrote, blocked error
	}
	var setpoint drivers.Point
	buses, err := drivers.OpenAllWith(context.Background(), m,
		drivers.Openers{manifest.BusModbusRTU: serial.open, manifest.BusI2C: adapter.open}, nil, false,
		drivers.OpenOptions{
			Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
			RetryFirst: time.Millisecond, RetryMax: 4 * time.Millisecond,
			OnOpen: func(ctx context.Context, bus string) {
				hook.calls.Add(1)
				hook.wrote = setpoint.Write(ctx, 20.0)
				_, hook.blocked = setpoint.Read(context.Background())
			},
		})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, b := range buses {
			b.Close()
		}
	}()
	if setpoint, err = drivers.Bind(buses["rs485"], m.Capabilities[0]); err != nil {
		t.Fatal(err)
	}
	temp, err := drivers.Bind(buses["i2c1"], m.Capabilities[1])
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = setpoint.Read(ctx)
	if !errors.Is(err, drivers.ErrNotOpen) || !errors.Is(err, drivers.ErrUnreachable) || !errors.Is(err, syscall.ENOENT) ||
		!strings.Contains(err.Error(), "bus rs485 not open: unreachable: opening /dev/ttyUSB0: no such file or directory") {
		t.Errorf("read of a pending bus: %v", err)
	}
	if err := setpoint.Write(ctx, 21.0); !errors.Is(err, drivers.ErrNotOpen) {
		t.Errorf("write to a pending bus: %v", err)
	}
	if d := setpoint.Describe(); d != "rs485 (modbus-rtu /dev/ttyUSB0) unit 1 holding 0 float32" {
		t.Errorf("Describe = %q", d)
	}
	eventually(t, time.Second, "ten failed attempts", func() bool { return serial.attempts.Load() > 10 })

	serial.present.Store(true)
	eventually(t, time.Second, "the serial bus opens", func() bool { _, err := setpoint.Read(ctx); return err == nil })
	if hook.calls.Load() != 1 || hook.wrote != nil || !strings.Contains(fmt.Sprint(hook.blocked), "its safe state is being written") {
		t.Errorf("OnOpen: %d calls, its write %v, another caller's read %v", hook.calls.Load(), hook.wrote, hook.blocked)
	}
	if s, err := setpoint.Read(ctx); err != nil || s.Value != 20.0 {
		t.Errorf("after opening: %+v %v", s, err)
	}
	// the other bus is still absent
	if _, err := temp.Read(ctx); !errors.Is(err, drivers.ErrNotOpen) {
		t.Errorf("the absent adapter: %v", err)
	}
	if n := logs.count("bus rs485 unavailable"); n != 1 {
		t.Errorf("logged unavailable %d times:\n%s", n, logs.buf.String())
	}
	if n := logs.count("bus rs485 opened") + logs.count("still unavailable"); n != 1 {
		t.Errorf("logged %d more state changes:\n%s", n, logs.buf.String())
	}
	// closing stops the retries
	buses["i2c1"].Close()
	n := adapter.attempts.Load()
	time.Sleep(20 * time.Millisecond)
	if adapter.attempts.Load() != n {
		t.Error("still retrying after Close")
	}
}

func TestOpenAllStrict(t *testing.T) {
	m := pendingManifest()
	var closed []string
	present := func(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
		return fakeBus{name: "real " + b.Name, closed: &closed}, nil
	}
	serial := &absent{}
	_, err := drivers.OpenAllWith(context.Background(), m, drivers.Openers{manifest.BusModbusRTU: serial.open, manifest.BusI2C: present}, nil, false,
		drivers.OpenOptions{Strict: true})
	if err == nil || err.Error() != "bus rs485 (modbus-rtu): unreachable: opening /dev/ttyUSB0: no such file or directory" {
		t.Errorf("strict: %v", err)
	}
	if strings.Join(closed, ",") != "real i2c1" {
		t.Errorf("closed %v", closed)
	}
}

// busyChip refuses to hand out lines while busy, as the kernel does for a
// line another process holds.
type busyChip struct {
	drivers.GPIOChip
	busy atomic.Bool
}

func (c *busyChip) Line(name string, offset int, cfg drivers.LineConfig) (drivers.GPIOLine, error) {
	if c.busy.Load() {
		return nil, fmt.Errorf("line %s: %w", name, syscall.EBUSY)
	}
	return c.GPIOChip.Line(name, offset, cfg)
}

// A line that cannot be requested at bind is pending, and starts at its safe
// level once requested; the chip's other lines serve meanwhile.
func TestPendingGPIOLine(t *testing.T) {
	f := gpioFixture(t)
	f.m.Capabilities[0].Binding.GPIO.SafeLevel = bptr(true)
	f.m.Buses["gpio"].Simulated = false
	chip := &busyChip{GPIOChip: f.bus.(drivers.GPIOChip)}
	chip.busy.Store(true)
	buses, err := drivers.OpenAllWith(context.Background(), f.m, drivers.Openers{manifest.BusGPIO: func(context.Context, *manifest.Manifest, *manifest.Bus) (drivers.Bus, error) {
		return chip, nil
	}}, nil, false, drivers.OpenOptions{Logger: slog.New(slog.DiscardHandler), RetryFirst: time.Millisecond, RetryMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := drivers.Bind(buses["gpio"], f.m.Capabilities[0])
	if err != nil {
		t.Fatalf("a busy line stopped the bind: %v", err)
	}
	ctx := context.Background()
	if err := relay.Write(ctx, false); !errors.Is(err, drivers.ErrNotOpen) || !errors.Is(err, syscall.EBUSY) ||
		!strings.Contains(err.Error(), "line GPIO17 of bus gpio not open") {
		t.Errorf("write to a busy line: %v", err)
	}
	sc := f.bus.(*sim.Chip)
	if sc.Level("GPIO17") {
		t.Fatal("the busy line was driven")
	}
	chip.busy.Store(false)
	eventually(t, time.Second, "the line is requested", func() bool { _, err := relay.Read(ctx); return err == nil })
	if !sc.Level("GPIO17") {
		t.Error("the line did not start at its safe level")
	}
	if err := relay.Write(ctx, false); err != nil || sc.Level("GPIO17") {
		t.Errorf("write once requested: %v", err)
	}
	if err := buses["gpio"].Close(); err != nil {
		t.Error(err)
	}
}
