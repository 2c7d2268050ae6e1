package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A pump with a cooldown whose calls give up after 1 s, on a bus whose
// exchanges may take 3 s: a write can wait out its deadline in the bus's
// queue behind another exchange.
const notSentManifest = `physmcp_version: "0.1"
device: {id: notsent_rig, type: test_rig}
buses:
  plc: %s
capabilities:
  - name: pump_speed
    kind: do
    description: Pump speed, with a cooldown.
    binding: {bus: plc, unit: 1, table: holding, address: 2, data_type: uint16}
    data_type: int
    range: {min: 0, max: 100}
    cooldown_ms: 2000
    timeout_ms: 1000
    semantic_tags: [pump]
    side_effects: ["pumps"]
`

// hogBus lets a test run hog just before the engine's next register write.
type hogBus struct {
	drivers.ModbusBus
	hog atomic.Pointer[func()]
}

func (h *hogBus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error {
	if hog := h.hog.Swap(nil); hog != nil {
		(*hog)()
	}
	return h.ModbusBus.WriteRegisters(ctx, unit, addr, values)
}

// notSentRig is the engine on a real bus (TCP on loopback, or RTU on a
// pseudo-terminal) to a device that misbehaves on demand, on a clock of the
// test's, so that a cooldown lasts until the test moves it.
func notSentRig(t *testing.T, rtu bool) (*wireRig, *hogBus, *testclock.Clock) {
	t.Helper()
	options := "timeout_ms: 3000, retries: 1"
	if !rtu {
		options += ", late_write_ms: 0"
	}
	dev, bus := wireDevice(t, rtu, options)
	hb := &hogBus{}
	clk := testclock.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	w := wireRigWith(t, dev, notSentManifest, bus, engine.Options{Now: clk.Now}, func(b drivers.Bus) drivers.Bus {
		hb.ModbusBus = b.(drivers.ModbusBus)
		return hb
	})
	return w, hb, clk
}

// A do_* whose write waited out its deadline in the bus's queue, behind a
// read the device held, never reached the device: it is answered not
// applied, charges no cooldown, leaves its key free, and a retry with the
// key writes it, once. A do_* whose reply was lost instead stays in doubt,
// is charged, and its retry settles it by reading the device, writing
// nothing more.
func TestWireWriteThatTimedOutInTheQueueWasNotSent(t *testing.T) {
	for _, rtu := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "rtu"}[rtu], func(t *testing.T) {
			t.Parallel()
			w, hb, clk := notSentRig(t, rtu)
			hold := make(chan struct{})
			w.dev.Inject(modbusfault.Fault{Mode: modbusfault.Delay, Match: modbusfault.At(3, 9), Times: 1, Hold: hold})
			reads := w.dev.Requests(3)
			hogDone := make(chan error, 1)
			hog := func() {
				go func() {
					_, err := hb.ReadRegisters(context.Background(), 1, manifest.TableHolding, 9, 1)
					hogDone <- err
				}()
				// the value before was read: this is the hog's read, on the wire
				w.await(t, func(ctx context.Context) error { return w.dev.AwaitRequests(ctx, 3, reads+2) })
			}
			hb.hog.Store(&hog)
			resp := w.do(t, "do_pump_speed", 40, "A")
			close(hold)
			if err := <-hogDone; err != nil {
				t.Fatalf("the read that held the bus: %v", err)
			}
			if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable ||
				!strings.Contains(resp.Reason, "nothing was applied") || !strings.Contains(resp.Reason, "waiting for the bus") {
				t.Fatalf("do_pump_speed whose write timed out in the queue = %+v, want not applied", resp)
			}
			if n := w.dev.Requests(6); n != 0 {
				t.Fatalf("%d write frames reached the device, want none", n)
			}
			if st, err := w.e.Action(operator, "do_pump_speed"); err != nil || st.Permission != promcp.Allowed {
				t.Fatalf("after the write that was not sent: %+v, %v; want allowed (nothing charged, no key in doubt)", st, err)
			}
			if retry := w.do(t, "do_pump_speed", 40, "A"); retry.Status != promcp.StatusSuccess {
				t.Fatalf("retry = %+v, want success", retry)
			}
			if n, v := w.dev.Writes(modbusfault.HoldingRegisters, 2), w.dev.Value(modbusfault.HoldingRegisters, 2); n != 1 || v != 40 || w.dev.Requests(6) != 1 {
				t.Fatalf("after the retry: %d writes applied, %d frames, value %d; want 1, 1, 40", n, w.dev.Requests(6), v)
			}

			// Regression guard: a write whose frame left and whose reply
			// was lost (its deadline passed) is in doubt, and charged.
			clk.Advance(2 * time.Second) // the retry's cooldown
			w.dev.Inject(modbusfault.Fault{Mode: modbusfault.ApplyNoReply, Match: modbusfault.At(6, 2), Times: 1})
			lost := w.do(t, "do_pump_speed", 60, "B")
			if lost.Status != promcp.StatusFailed || !strings.Contains(lost.Reason, "outcome is unknown") {
				t.Fatalf("do_pump_speed whose reply was lost = %+v, want in doubt", lost)
			}
			w.await(t, func(ctx context.Context) error { return w.dev.AwaitHandled(ctx, 6, 2) })
			if st, err := w.e.Action(operator, "do_pump_speed"); err != nil || st.Permission != promcp.CooldownActive {
				t.Fatalf("after the write in doubt: %+v, %v; want cooldown_active (charged)", st, err)
			}
			if retry := w.do(t, "do_pump_speed", 60, "B"); retry.Status != promcp.StatusSuccess || w.dev.Requests(6) != 2 || w.dev.Writes(modbusfault.HoldingRegisters, 2) != 2 {
				t.Fatalf("retry of the write in doubt = %+v, %d frames, %d writes applied; want settled by read-back, 2 and 2",
					retry, w.dev.Requests(6), w.dev.Writes(modbusfault.HoldingRegisters, 2))
			}
		})
	}
}
