package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A pump interlocked on a level that this daemon can also write (a level
// setpoint on the same register, as a simulated process would take it).
const levelRigManifest = `physmcp_version: "0.1"
device: {id: level_rig_01, type: test_rig}
buses:
  plc: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
capabilities:
  - name: level
    kind: do
    description: Level the process holds.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [level]
    simulation: {initial: 50}
  - name: level
    kind: read
    description: Level the process holds.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [level]
  - name: pump
    kind: do
    description: Pump, allowed to start only above 10 % level.
    binding: {bus: plc, unit: 1, table: coil, address: 0, data_type: bool}
    data_type: bool
    semantic_tags: [pump]
    interlocks:
      - {capability: read_level, op: ">", value: 10, when: true}
`

// pumpWatch checks, at the moment each pump-on write reaches the bus, the
// level the device holds then.
type pumpWatch struct {
	drivers.ModbusBus
	violations atomic.Int64
	pumpOns    atomic.Int64
}

func (w *pumpWatch) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	if v[0] {
		w.pumpOns.Add(1)
		level, err := w.ModbusBus.ReadRegisters(ctx, unit, manifest.TableHolding, 0, 1)
		if err != nil {
			return err
		}
		if level[0] <= 10 {
			w.violations.Add(1)
		}
	}
	return w.ModbusBus.WriteCoils(ctx, unit, addr, v)
}

// An interlocked write and a write to its source race 200 times through one
// daemon: the pump must never be switched on while the level is 10 or less.
func TestInterlockedWriteNeverLandsOnAFailingSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.yml")
	if err := os.WriteFile(path, []byte(levelRigManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	plc := buses["plc"].(simBus)
	plc.SetLatency(100 * time.Microsecond)
	watch := &pumpWatch{ModbusBus: buses["plc"].(drivers.ModbusBus)}
	e, err := engine.New(m, nil, map[string]drivers.Bus{"plc": watch}, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })

	const races = 200
	refused := 0
	for i := range races {
		if err := plc.SetValue("level", int64(50)); err != nil {
			t.Fatal(err)
		}
		if err := plc.SetValue("pump", false); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var pump promcp.DoResponse
		calls := []func(){
			func() {
				pump, _ = e.Do(context.Background(), operator, "do_pump", promcp.DoRequest{Value: true, IdempotencyKey: fmt.Sprintf("pump-%d", i)})
			},
			func() {
				_, _ = e.Do(context.Background(), operator, "do_level", promcp.DoRequest{Value: 5, IdempotencyKey: fmt.Sprintf("level-%d", i)})
			},
		}
		// Alternate which call starts first, so both orders occur under any load.
		wg.Go(calls[i%2])
		wg.Go(calls[1-i%2])
		wg.Wait()
		if pump.Status == promcp.StatusFailed {
			refused++
		}
	}
	t.Logf("%d races: pump on %d times, refused %d times by the interlock, %d violations", races, watch.pumpOns.Load(), refused, watch.violations.Load())
	if v := watch.violations.Load(); v != 0 {
		t.Fatalf("the pump was switched on %d times while the level was 10 or less", v)
	}
	if refused == 0 || refused == races {
		t.Fatalf("refused %d of %d: the races did not interleave both ways", refused, races)
	}
}
