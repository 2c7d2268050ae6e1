package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A do_* call that comes while the dead man's safe state is under way
// re-arms it, and the safe state then leaves alone the points it has not
// driven yet: the agent is back, and its write is not undone behind its
// back. Here the oven's safe write is held in its driver while the agent
// switches the pump on (answered success); once the oven's write returns,
// the pump stays on and the valve is not driven either (the silence is
// over, as for the dead man's retries). Before, the dead man went on to the pump and switched
// it off: the device contradicted the answer the agent had just been given.
func TestDeadManLeavesAloneWhatAnAgentWroteMeanwhile(t *testing.T) {
	clk := testclock.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	h, wrap := newHoldBus()
	e, wire := opsRigOn(t, "", engine.Options{Now: clk.Now}, wrap)
	t.Cleanup(h.release)
	e.Manifest().SafeState = &manifest.SafeState{DeadManTimeoutMs: 60000}
	t.Cleanup(func() { e.Manifest().SafeState = nil })

	clk.Advance(time.Minute)
	h.arm("reg0=[200]") // the oven's safe write, the first the dead man makes
	fired := make(chan error, 1)
	go func() {
		_, err := e.CheckDeadMan(context.Background())
		fired <- err
	}()
	<-h.held
	r, err := e.Do(context.Background(), operator, "do_pump", promcp.DoRequest{Value: true, IdempotencyKey: "back"})
	if err != nil || r.Status != promcp.StatusSuccess {
		t.Fatalf("the agent's do_pump while the dead man ran: %+v, %v", r, err)
	}
	h.release()
	if err := <-fired; err != nil {
		t.Fatalf("dead man: %v", err)
	}
	// the wire logs the held write once it is let go
	if got := wire.log(); !slices.Equal(got, []string{"coil1=[true]", "reg0=[200]"}) {
		t.Fatalf("writes: %v; want the agent's pump on and the oven's held safe value, nothing after them (the pump's, the valve's)", got)
	}
}
