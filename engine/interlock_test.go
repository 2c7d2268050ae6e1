package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// faultyModbus wraps a simulated Modbus bus with faults per unit: a unit can
// stop answering or make the driver panic. It counts transactions per unit.
type faultyModbus struct {
	drivers.ModbusBus
	mu     sync.Mutex
	down   map[uint8]bool
	panics map[uint8]bool
	txs    map[uint8]int
}

func (f *faultyModbus) check(unit uint8) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txs[unit]++
	if f.panics[unit] {
		panic(fmt.Sprintf("driver bug on unit %d", unit))
	}
	if f.down[unit] {
		return fmt.Errorf("unit %d: no answer: %w", unit, drivers.ErrTimeout)
	}
	return nil
}

func (f *faultyModbus) setDown(unit uint8, down bool) {
	f.mu.Lock()
	f.down[unit] = down
	f.mu.Unlock()
}

func (f *faultyModbus) setPanic(unit uint8, p bool) {
	f.mu.Lock()
	f.panics[unit] = p
	f.mu.Unlock()
}

func (f *faultyModbus) transactions(unit uint8) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.txs[unit]
}

func (f *faultyModbus) ReadBits(ctx context.Context, unit uint8, t manifest.ModbusTable, addr, n uint16) ([]bool, error) {
	if err := f.check(unit); err != nil {
		return nil, err
	}
	return f.ModbusBus.ReadBits(ctx, unit, t, addr, n)
}

func (f *faultyModbus) ReadRegisters(ctx context.Context, unit uint8, t manifest.ModbusTable, addr, n uint16) ([]uint16, error) {
	if err := f.check(unit); err != nil {
		return nil, err
	}
	return f.ModbusBus.ReadRegisters(ctx, unit, t, addr, n)
}

func (f *faultyModbus) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	if err := f.check(unit); err != nil {
		return err
	}
	return f.ModbusBus.WriteCoils(ctx, unit, addr, v)
}

func (f *faultyModbus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	if err := f.check(unit); err != nil {
		return err
	}
	return f.ModbusBus.WriteRegisters(ctx, unit, addr, v)
}

// tankRig is the tank device: pump and valve on unit 1, level and mode on unit 2.
type tankRig struct {
	*rig
	plc simBus
	net *faultyModbus
}

func newTankRig(t *testing.T) *tankRig {
	t.Helper()
	m, diags := manifest.Load("testdata/tank.manifest.yml")
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	clk := testclock.New(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), true)
	if err != nil {
		t.Fatal(err)
	}
	plc := buses["plc"]
	net := &faultyModbus{ModbusBus: plc.(drivers.ModbusBus), down: map[uint8]bool{}, panics: map[uint8]bool{}, txs: map[uint8]int{}}
	e, err := engine.New(m, nil, map[string]drivers.Bus{"plc": net}, engine.Options{Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	r := &tankRig{rig: &rig{e: e, clock: clk, buses: buses}, net: net}
	r.plc = r.bus(t, "plc")
	return r
}

func (r *tankRig) set(t *testing.T, capability string, v any) {
	t.Helper()
	if err := r.plc.SetValue(capability, v); err != nil {
		t.Fatal(err)
	}
}

// blockedFor returns the tool's blocked entry in a can_do report.
func blockedFor(rep promcp.CapabilityReport, tool string) (promcp.Blocked, bool) {
	for _, b := range rep.Blocked {
		if b.Capability == tool {
			return b, true
		}
	}
	return promcp.Blocked{}, false
}

func TestInterlockBlocksOnlyTheGuardedValue(t *testing.T) {
	r := newTankRig(t)
	r.set(t, "tank_level", 93.0)
	pumpOn := promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Target: "pump_run", Value: true}
	b, ok := blockedFor(r.canDo(t, operator, pumpOn), "do_pump_run")
	if !ok || b.Permission != promcp.PolicyDenied || !strings.Contains(b.Reason, "tank nearly full") || !strings.Contains(b.Reason, "read_tank_level is 93") {
		t.Fatalf("can_do pump on at 93 %%: want blocked policy_denied with the reason, got %+v (ok %v)", b, ok)
	}
	resp := r.do(t, operator, "do_pump_run", true, "")
	if resp.Status != promcp.StatusFailed || resp.Permission != promcp.PolicyDenied || !strings.Contains(resp.Reason, "tank nearly full") {
		t.Fatalf("do pump on at 93 %%: %+v", resp)
	}
	if w := r.plc.Writes(); w != 0 {
		t.Fatalf("an interlocked call wrote %d times", w)
	}
	// Switching off is never interlocked (when: true).
	pumpOff := pumpOn
	pumpOff.Value = false
	if p, _ := permissionFor(r.canDo(t, operator, pumpOff), "do_pump_run"); p != promcp.Allowed {
		t.Errorf("can_do pump off: %s", p)
	}
	if resp := r.do(t, operator, "do_pump_run", false, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do pump off: %+v", resp)
	}
	// An intent without a value is checked against every interlock.
	anyValue := promcp.Intent{SemanticTags: []string{"pump"}, Target: "pump_run"}
	if _, ok := blockedFor(r.canDo(t, operator, anyValue), "do_pump_run"); !ok {
		t.Errorf("can_do without a value must be blocked by the interlock")
	}
	// An interlock without when guards every value.
	if resp := r.do(t, operator, "do_inlet_valve", 10.0, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("valve at 93 %% (<= 95 holds): %+v", resp)
	}
	r.set(t, "tank_level", 96.0)
	r.clock.Advance(time.Minute)
	if resp := r.do(t, operator, "do_inlet_valve", 0.0, ""); resp.Permission != promcp.PolicyDenied {
		t.Fatalf("valve at 96 %%: want policy_denied, got %+v", resp)
	}
}

func TestInterlockAllowsAndAnswersBriefly(t *testing.T) {
	r := newTankRig(t)
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Target: "pump_run", Value: true})
	if len(rep.Candidates) == 0 || rep.Candidates[0].Capability != "do_pump_run" || rep.Candidates[0].Permission != promcp.Allowed {
		t.Fatalf("can_do pump on at 50 %%: %+v", rep)
	}
	until, err := time.Parse(time.RFC3339Nano, rep.Candidates[0].ValidUntil)
	if err != nil {
		t.Fatal(err)
	}
	if now := r.clock.Now(); until.After(now.Add(5*time.Second)) || !until.After(now) {
		t.Errorf("valid_until %s: an interlocked answer must hold 1-5 s from %s", until, now)
	}
	if resp := r.do(t, operator, "do_pump_run", true, ""); resp.Status != promcp.StatusSuccess || resp.AppliedValue != true {
		t.Fatalf("do pump on at 50 %%: %+v", resp)
	}
}

// can_do may use a reading still in its cache; do_* reads the source afresh
// right before writing, so a change the cache hides still blocks the write.
func TestInterlockReadsTheSourceFreshBeforeWriting(t *testing.T) {
	r := newTankRig(t)
	if got := r.read(t, "read_tank_level"); got.Value != 50.0 {
		t.Fatalf("level: %+v", got)
	}
	r.set(t, "tank_level", 95.0) // the cache (1 s TTL, clock stopped) still says 50
	if got := r.read(t, "read_tank_level"); got.Value != 50.0 {
		t.Fatalf("the cached level should still be served: %+v", got)
	}
	pumpOn := promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Target: "pump_run", Value: true}
	if p, _ := permissionFor(r.canDo(t, operator, pumpOn), "do_pump_run"); p != promcp.Allowed {
		t.Fatalf("can_do on the cached 50 %%: %s", p)
	}
	resp := r.do(t, operator, "do_pump_run", true, "")
	if resp.Permission != promcp.PolicyDenied || !strings.Contains(resp.Reason, "read_tank_level is 95") {
		t.Fatalf("do must read the level afresh: %+v", resp)
	}
	if w := r.plc.Writes(); w != 0 {
		t.Fatalf("wrote %d times", w)
	}
}

func TestInterlockOnUnknownStateRefuses(t *testing.T) {
	r := newTankRig(t)
	// The source does not answer: refuse, never act on unknown state.
	r.net.setDown(2, true)
	resp := r.do(t, operator, "do_pump_run", true, "")
	if resp.Permission != promcp.SourceUnreachable || !strings.Contains(resp.Reason, "interlock read_tank_level < 90") {
		t.Fatalf("unreadable source: %+v", resp)
	}
	b, ok := blockedFor(r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Target: "pump_run", Value: true}), "do_pump_run")
	if !ok || b.Permission != promcp.SourceUnreachable {
		t.Errorf("can_do with an unreadable source: %+v", b)
	}
	// The interlock does not apply to switching off, so the source is not needed.
	if resp := r.do(t, operator, "do_pump_run", false, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("pump off with the source down: %+v", resp)
	}
	r.net.setDown(2, false)
	// An implausible reading is unknown state too.
	r.set(t, "tank_level", 150.0)
	r.clock.Advance(time.Minute)
	if resp := r.do(t, operator, "do_pump_run", true, ""); resp.Permission != promcp.PolicyDenied || !strings.Contains(resp.Reason, "implausible") {
		t.Fatalf("implausible source: %+v", resp)
	}
	// An enum interlock.
	r.set(t, "tank_level", 50.0)
	r.set(t, "tank_mode", "fault")
	resp = r.do(t, operator, "do_pump_run", true, "")
	if resp.Permission != promcp.PolicyDenied || !strings.Contains(resp.Reason, "read_tank_mode != fault") {
		t.Fatalf("controller in fault: %+v", resp)
	}
	if w := r.plc.Writes(); w != 1 {
		t.Fatalf("want only the pump-off write, got %d writes", w)
	}
}
