package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// stallingBus holds the first register read after it has read the device,
// so a test can let a write happen while that read is still under way.
type stallingBus struct {
	drivers.ModbusBus
	first   atomic.Bool
	stalled chan struct{} // closed when the first read has its (old) value
	release chan struct{}
}

func (b *stallingBus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	regs, err := b.ModbusBus.ReadRegisters(ctx, unit, table, addr, count)
	// Only the first read stalls; sync.Once would also hold every later caller.
	if b.first.CompareAndSwap(false, true) {
		close(b.stalled)
		<-b.release
	}
	return regs, err
}

// stallingEngine is the rig's engine with its Modbus bus a stallingBus.
func stallingEngine(t *testing.T) (*engine.Engine, *stallingBus) {
	t.Helper()
	r := newRig(t)
	stall := &stallingBus{ModbusBus: r.buses["mb"].(drivers.ModbusBus), stalled: make(chan struct{}), release: make(chan struct{})}
	buses := map[string]drivers.Bus{}
	for name, b := range r.buses {
		buses[name] = b
	}
	buses["mb"] = stall
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), buses, engine.Options{Now: r.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return e, stall
}

// A read that began before a write and ends after it must not be cached:
// the next read has to show the written value, not the one from before.
func TestReadOverlappingAWriteIsNotCached(t *testing.T) {
	e, stall := stallingEngine(t)
	old := make(chan promcp.ReadResponse)
	go func() {
		resp, _ := e.Read(context.Background(), operator, "read_boiler_setpoint")
		old <- resp
	}()
	<-stall.stalled
	resp, err := e.Do(context.Background(), operator, "do_boiler_setpoint", promcp.DoRequest{Value: 55.0, IdempotencyKey: "during-read"})
	if err != nil || resp.Status != promcp.StatusSuccess {
		t.Fatalf("do = %+v %v", resp, err)
	}
	close(stall.release)
	if got := <-old; got.Value != 40.0 {
		t.Fatalf("the overlapping read = %v, want the value it measured (40)", got.Value)
	}
	if got, _ := e.Read(context.Background(), operator, "read_boiler_setpoint"); got.Value != 55.0 {
		t.Fatalf("read after the write = %v, want 55 (a stale reading was cached)", got.Value)
	}
}

// A read_* that begins after a do_* returned must show what the device holds
// since the write, not join a read that began before it: do_* then read_* to
// verify is the canonical loop.
func TestReadAfterAWriteDoesNotJoinAnOlderRead(t *testing.T) {
	e, stall := stallingEngine(t)
	old := make(chan promcp.ReadResponse, 1)
	go func() {
		resp, _ := e.Read(context.Background(), operator, "read_boiler_setpoint")
		old <- resp
	}()
	<-stall.stalled
	resp, err := e.Do(context.Background(), operator, "do_boiler_setpoint", promcp.DoRequest{Value: 55.0, IdempotencyKey: "during-read"})
	if err != nil || resp.Status != promcp.StatusSuccess {
		t.Fatalf("do = %+v %v", resp, err)
	}
	after := make(chan promcp.ReadResponse, 1)
	go func() {
		resp, _ := e.Read(context.Background(), operator, "read_boiler_setpoint")
		after <- resp
	}()
	select {
	case got := <-after:
		if got.Value != 55.0 {
			t.Fatalf("read after the write = %v, want 55", got.Value)
		}
	case <-time.After(10 * time.Second): // only a failure waits: joined, it would return when released
		close(stall.release)
		t.Fatalf("the read after the write waited for the read begun before it, and got %v", (<-after).Value)
	}
	close(stall.release)
	<-old
}
