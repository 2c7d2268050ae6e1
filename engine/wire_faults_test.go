package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// wireRig is the engine on a real Modbus bus (TCP on loopback or RTU on a
// pseudo-terminal) to a device that misbehaves on demand.
type wireRig struct {
	e   *engine.Engine
	dev *modbusfault.Device
	m   *manifest.Manifest
	// wrap, when set, stands between the engine and each bus open opens.
	wrap func(drivers.Bus) drivers.Bus
}

// wireTimeout is the buses' timeout_ms: long enough that a loaded machine
// running the race detector answers every request the device does not fault
// in time (loopback exchanges took up to 0.4 s at load 18 on 2 cores), as
// only the faulted ones may time out.
const wireTimeout = 1500

// A holding register (FC6 writes) with a safe value, and one with a 2 s cooldown.
const wireManifest = `physmcp_version: "0.1"
device: {id: wire_rig, type: test_rig}
buses:
  plc: %s
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: "l/min"
    range: {min: 0, max: 1000}
    semantic_tags: [flow]
    side_effects: ["changes the flow"]
    safe_value: 0
  - name: heater_power
    kind: do
    description: Heater power, with a cooldown.
    binding: {bus: plc, unit: 1, table: holding, address: 1, data_type: uint16}
    data_type: int
    unit: "%%"
    range: {min: 0, max: 100}
    cooldown_ms: 2000
    semantic_tags: [heater]
    side_effects: ["heats"]
`

func newWireRig(t *testing.T, rtu bool, retries int) *wireRig {
	t.Helper()
	dev, bus := wireDevice(t, rtu, fmt.Sprintf("timeout_ms: %d, retries: %d", wireTimeout, retries))
	return wireRigOn(t, dev, bus, engine.Options{})
}

// wireDevice starts a device that misbehaves on demand, over RTU on a
// pseudo-terminal or TCP on loopback, and returns it and its bus as a
// manifest describes it, with options (YAML flow mapping entries) added.
func wireDevice(t *testing.T, rtu bool, options string) (*modbusfault.Device, string) {
	t.Helper()
	if rtu {
		s := modbusfault.StartRTU(t)
		return s.Device, fmt.Sprintf("{type: modbus-rtu, port: %s, baud: 115200, parity: none, stop_bits: 1, %s}", s.Path(), options)
	}
	s := modbusfault.StartTCP(t)
	return s.Device, fmt.Sprintf("{type: modbus-tcp, address: %q, %s}", s.Addr(), options)
}

// wireRigOn is a rig on dev, whose bus the manifest describes as bus.
func wireRigOn(t *testing.T, dev *modbusfault.Device, bus string, opts engine.Options) *wireRig {
	t.Helper()
	return wireRigWith(t, dev, wireManifest, bus, opts, nil)
}

// wireRigWith is wireRigOn with the manifest template (a format taking the
// bus) and wrap around each bus the engine is given (nil: none).
func wireRigWith(t *testing.T, dev *modbusfault.Device, template, bus string, opts engine.Options, wrap func(drivers.Bus) drivers.Bus) *wireRig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wire.manifest.yml")
	if err := os.WriteFile(path, fmt.Appendf(nil, template, bus), 0o600); err != nil {
		t.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	w := &wireRig{dev: dev, m: m, wrap: wrap}
	w.e = w.open(t, opts)
	return w
}

// open binds a new engine to newly opened buses, as a daemon's start does.
func (w *wireRig) open(t *testing.T, opts engine.Options) *engine.Engine {
	t.Helper()
	buses, err := drivers.OpenAll(context.Background(), w.m, drivers.Openers{
		manifest.BusModbusTCP: modbus.OpenTCP, manifest.BusModbusRTU: modbus.OpenRTU,
	}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if w.wrap != nil {
		for name, b := range buses {
			buses[name] = w.wrap(b)
		}
	}
	opts.Logger = quiet
	e, err := engine.New(w.m, nil, buses, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func (w *wireRig) do(t *testing.T, tool string, v int, key string) promcp.DoResponse {
	t.Helper()
	resp, err := w.e.Do(context.Background(), operator, tool, promcp.DoRequest{Value: v, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// awaitClear waits until tool's refusal clears by itself (a cooldown, a
// settle window), at the moment the engine says it does.
func (w *wireRig) awaitClear(t *testing.T, tool string) {
	t.Helper()
	st, err := w.e.Action(operator, tool)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClearsAt.IsZero() {
		t.Fatalf("%s: %s (%s) does not clear by itself", tool, st.Permission, st.Reason)
	}
	time.Sleep(time.Until(st.ClearsAt))
}

// wireModes are the faults a write can meet, and whether the device applies
// the write in each. A Delay reply is held until the call has returned.
var wireModes = []modbusfault.Fault{
	{Mode: modbusfault.ApplyDrop}, {Mode: modbusfault.ApplyNoReply}, {Mode: modbusfault.ApplyFIN},
	{Mode: modbusfault.ApplyRST}, {Mode: modbusfault.Hang}, {Mode: modbusfault.Delay},
	{Mode: modbusfault.Exception, Code: 3}, {Mode: modbusfault.Garble}, {Mode: modbusfault.Mismatch},
	{Mode: modbusfault.ApplyException, Code: 11}, {Mode: modbusfault.AckLater},
}

// faulted makes a call that meets fault on its FC6 write, then lets the
// device finish with every FC6 frame sent so far, the faulted one included,
// before the test looks at the device or calls again: a frame may reach the
// device after the client gave up on it (its outcome is in doubt, the device
// may still act on it), and a held Delay reply goes out only now, late.
func (w *wireRig) faulted(t *testing.T, fault modbusfault.Fault, v int, key string) promcp.DoResponse {
	t.Helper()
	hold := make(chan struct{})
	fault.Match, fault.Times, fault.Hold = modbusfault.At(6, 0), 1, hold
	sent, applied := w.dev.Requests(6), w.dev.Writes(modbusfault.HoldingRegisters, 0)
	w.dev.Inject(fault)
	resp := w.do(t, "do_flow_setpoint", v, key)
	close(hold)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.dev.AwaitHandled(ctx, 6, sent+1); err != nil {
		t.Fatalf("%s: the faulted write never reached the device: %v (call answered %+v)", key, err, resp)
	}
	if n := w.dev.Requests(6) - sent; n != 1 {
		t.Fatalf("%s: one call put %d FC6 frames on the wire (answered %+v)", key, n, resp)
	}
	if fault.Mode == modbusfault.AckLater {
		// acknowledged: it is applied after its answer
		if err := w.dev.AwaitWrites(ctx, modbusfault.HoldingRegisters, 0, applied+1); err != nil {
			t.Fatalf("%s: the acknowledged write was never applied: %v", key, err)
		}
	}
	return resp
}

// For every fault a write can meet, every bus retries setting and both
// transports, through the whole engine: one do_* call puts at most one write
// on the device; retrying its key settles it without a second write (or
// writes once when the first never applied); a later key's write is never
// undone by a retry of the lost one.
//
// The scenarios run all at once rather than -parallel at a time: they spend
// most of their time waiting out the bus timeout. Their rigs are set up one
// at a time: a setup's burst of work would otherwise delay, on a loaded
// machine, the exchanges of the scenarios already running past the timeout.
func TestWireFaultsOneWritePerCall(t *testing.T) {
	var mu, setup sync.Mutex
	var wg sync.WaitGroup
	scenarios, calls, applied := 0, 0, 0
	for _, rtu := range []bool{false, true} {
		for _, retries := range []int{0, 1, 3} {
			for _, f := range wireModes {
				name := fmt.Sprintf("tcp/retries=%d/%s", retries, f.Mode)
				if rtu {
					name = fmt.Sprintf("rtu/retries=%d/%s", retries, f.Mode)
				}
				wg.Go(func() {
					t.Run(name, func(t *testing.T) {
						w := func() *wireRig {
							setup.Lock()
							defer setup.Unlock()
							return newWireRig(t, rtu, retries)
						}()
						// An acknowledge opens a window on either bus.
						n, c := wireScenario(t, w, f, !rtu || f.Mode == modbusfault.AckLater)
						mu.Lock()
						scenarios++
						calls += c
						applied += n
						mu.Unlock()
					})
				})
			}
		}
	}
	wg.Wait()
	t.Cleanup(func() {
		fmt.Printf("engine wire faults: %d scenarios (%d fault modes x retries 0,1,3 x TCP/RTU), %d do_* calls, %d writes applied, 0 applied twice\n", scenarios, len(wireModes), calls, applied)
	})
}

// wireScenario makes five or six calls, two of them meeting f, and returns
// how many writes the device applied and how many calls it made. window says the write has a settle
// window (late_write_ms, TCP; acknowledge_ms after an acknowledge): another key's write during it is refused,
// until the device's late reply to the lost write (a held Delay reply)
// proves it applied.
func wireScenario(t *testing.T, w *wireRig, f modbusfault.Fault, window bool) (applied, calls int) {
	first := w.faulted(t, f, 500, "A")
	writesA := w.dev.Writes(modbusfault.HoldingRegisters, 0)
	want := 0
	if f.Mode.Applies() {
		want = 1
	}
	if writesA != want || w.dev.Requests(6) != 1 {
		t.Fatalf("first call (%s): %d writes applied, %d FC6 frames; want %d and 1", first.Status, writesA, w.dev.Requests(6), want)
	}
	switch {
	case f.Mode == modbusfault.Exception:
		if first.Permission != promcp.DeviceRejected {
			t.Fatalf("exception reply answered %+v", first)
		}
	case first.Status != promcp.StatusFailed || first.PreviousValue == nil:
		t.Fatalf("lost outcome answered %+v", first)
	}
	// The retry settles the key: confirmed if applied, written once if not.
	again := w.do(t, "do_flow_setpoint", 500, "A")
	if again.Status != promcp.StatusSuccess || w.dev.Writes(modbusfault.HoldingRegisters, 0) != 1 {
		t.Fatalf("retry: %+v, %d writes applied; want success and 1", again, w.dev.Writes(modbusfault.HoldingRegisters, 0))
	}
	frames := w.dev.Requests(6)

	// C lost, B, retry C: C must not undo B. A C the device
	// refused never happened, so its retry is a new write.
	w.faulted(t, f, 600, "C")
	echo := window && f.Mode == modbusfault.Delay
	if echo {
		// C's reply came late on its connection: C is settled as applied
		// (a retry meanwhile waits for that), and its window is over.
		if c := w.do(t, "do_flow_setpoint", 600, "C"); c.Status != promcp.StatusSuccess {
			t.Fatalf("retry of C after its late reply = %+v, want success", c)
		}
	}
	b := w.do(t, "do_flow_setpoint", 700, "B")
	if inDoubt := f.Mode != modbusfault.Exception; window && inDoubt && !echo {
		// C's frame may still land: B waits for the window's end.
		if b.Permission != promcp.CooldownActive || !strings.Contains(b.Reason, `"C"`) {
			t.Fatalf("B inside C's settle window = %+v, want cooldown_active naming C", b)
		}
		w.awaitClear(t, "do_flow_setpoint")
		b = w.do(t, "do_flow_setpoint", 700, "B")
	}
	if b.Status != promcp.StatusSuccess {
		t.Fatalf("B = %+v", b)
	}
	retryC := w.do(t, "do_flow_setpoint", 600, "C")
	want = 700
	switch {
	case f.Mode == modbusfault.Exception:
		want = 600
	case echo:
		if retryC.Status != promcp.StatusSuccess || retryC.AppliedValue == nil {
			t.Fatalf("retry of C after B = %+v, want C's outcome replayed", retryC)
		}
	case retryC.Permission != promcp.Superseded:
		t.Fatalf("retry of C after B = %+v, want superseded", retryC)
	}
	if got := w.dev.Value(modbusfault.HoldingRegisters, 0); int(got) != want {
		t.Fatalf("after B and a retry of C the device holds %d, want %d (retry answered %+v)", got, want, retryC)
	}
	t.Logf("FC6 frames %d after A and its retry, %d in all", frames, w.dev.Requests(6))
	calls = 5
	if echo {
		calls++
	}
	return w.dev.Writes(modbusfault.HoldingRegisters, 0), calls
}

// An in-doubt write over the wire is charged to the cooldown. Without a
// late-write window, which would refuse B by itself, so only the charge
// does. The engine's clock is the test's: on the wall clock, a host that
// stalled the test for the rest of the 2 s cooldown would have failed it.
func TestWireInDoubtWriteIsChargedToTheCooldown(t *testing.T) {
	s := modbusfault.StartTCP(t)
	clk := testclock.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	bus := fmt.Sprintf("{type: modbus-tcp, address: %q, timeout_ms: %d, retries: 3, late_write_ms: 0}", s.Addr(), wireTimeout)
	w := wireRigOn(t, s.Device, bus, engine.Options{Now: clk.Now})
	w.dev.Inject(modbusfault.Fault{Mode: modbusfault.ApplyRST, Match: modbusfault.At(6, 1), Times: 1})
	if resp := w.do(t, "do_heater_power", 40, "A"); resp.Status != promcp.StatusFailed {
		t.Fatalf("A = %+v", resp)
	}
	clk.Advance(300 * time.Millisecond)
	if resp := w.do(t, "do_heater_power", 60, "B"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("B 0.3 s after an in-doubt write = %+v, want cooldown_active", resp)
	}
	if n := w.dev.Writes(modbusfault.HoldingRegisters, 1); n != 1 {
		t.Fatalf("%d writes applied, want 1", n)
	}
}
